// ringattn — IEEE 754 half precision (fp16) bit patterns, converted in plain integer code
// so every compiler and CPU gives the same bits (GCC 12 has no _Float16 in C++ on aarch64).
//
//   std::uint16_t h = ringattn::to_f16(0.1f);    // nearest even: 0x2E66
//   float f = ringattn::from_f16(h);             // exact: 0.0999755859375f
//
// to_f16 rounds to nearest, ties to even, as F16C's vcvtps2ph and ARM's fcvt do: past the
// largest half (65504) to infinity from 65520 up, below the smallest normal (2^-14) to
// subnormals and zero, NaN to a quiet NaN keeping the sign and the payload's top bits.
// from_f16 is exact for every pattern.
#pragma once

#include <cstdint>
#include <cstring>

namespace ringattn {

inline float from_f16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  std::uint32_t u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000u | mant << 13;  // inf, NaN
  } else if (exp != 0) {
    u = sign | (exp + 112) << 23 | mant << 13;  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    u = sign;  // zero
  } else {  // subnormal mant * 2^-24: normalise
    int e = 113;
    std::uint32_t m = mant;
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    u = sign | static_cast<std::uint32_t>(e) << 23 | (m & 0x3FFu) << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t to_f16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // NaN, quiet
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520 (and inf): inf
  const std::uint32_t e = a >> 23;
  std::uint32_t h, rem, halfway;
  if (e >= 113) {  // normal half: exponent e - 112, 13 bits dropped
    h = (e - 112) << 10 | ((a >> 13) & 0x3FFu);
    rem = a & 0x1FFFu;
    halfway = 0x1000u;
  } else {  // subnormal half: (1.m * 2^(e-127)) / 2^-24 = m24 >> (126 - e)
    const std::uint32_t shift = 126 - e;
    if (shift > 24) return sign;  // below 2^-25: zero
    const std::uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    h = m >> shift;
    rem = m & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  }
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;  // a carry moves into the exponent: right
  return static_cast<std::uint16_t>(sign | h);
}

}  // namespace ringattn
