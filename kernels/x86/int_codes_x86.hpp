// The integer block arithmetic's weight codes (kernels/int_blocks.hpp's unpack_codes) on
// AVX2: a packed panel block's step-major bytes transposed 4 steps at a time into
// codes[g][c][i] with byte unpacks, the same bytes as the portable loop. Included by the
// x86 int files (AVX2 at least); internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/int_blocks.hpp"

namespace ringattn::kernels {
namespace {

// Rows a, b, c, d (steps 4g..4g+3) of 32 column bytes each, as [32 columns][4 steps] at out.
inline void transpose_4x32(__m256i a, __m256i b, __m256i c, __m256i d, std::uint8_t* out) {
  const __m256i ab_lo = _mm256_unpacklo_epi8(a, b), ab_hi = _mm256_unpackhi_epi8(a, b);
  const __m256i cd_lo = _mm256_unpacklo_epi8(c, d), cd_hi = _mm256_unpackhi_epi8(c, d);
  const __m256i q0 = _mm256_unpacklo_epi16(ab_lo, cd_lo);  // columns 0-3 | 16-19
  const __m256i q1 = _mm256_unpackhi_epi16(ab_lo, cd_lo);  // 4-7 | 20-23
  const __m256i q2 = _mm256_unpacklo_epi16(ab_hi, cd_hi);  // 8-11 | 24-27
  const __m256i q3 = _mm256_unpackhi_epi16(ab_hi, cd_hi);  // 12-15 | 28-31
  auto* o = reinterpret_cast<__m256i*>(out);
  _mm256_storeu_si256(o, _mm256_permute2x128_si256(q0, q1, 0x20));
  _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(q2, q3, 0x20));
  _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(q0, q1, 0x31));
  _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(q2, q3, 0x31));
}

inline __m256i load2(const std::uint8_t* lo, const std::uint8_t* hi) {
  return _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo)));
}

// Nibble rows (16 bytes a step: byte c holds column c low, c + 16 high): groups g and g + 1
// at once, one a 128-bit lane.
inline void nibble_groups(const std::uint8_t* nib, int g, std::uint8_t* codes) {
  const std::uint8_t* r0 = nib + g * 64;  // step 4g: 4 steps of 16 bytes a group
  const __m256i a = load2(r0, r0 + 64), b = load2(r0 + 16, r0 + 80), c = load2(r0 + 32, r0 + 96),
                d = load2(r0 + 48, r0 + 112);
  const __m256i ab_lo = _mm256_unpacklo_epi8(a, b), ab_hi = _mm256_unpackhi_epi8(a, b);
  const __m256i cd_lo = _mm256_unpacklo_epi8(c, d), cd_hi = _mm256_unpackhi_epi8(c, d);
  const __m256i q[4] = {_mm256_unpacklo_epi16(ab_lo, cd_lo), _mm256_unpackhi_epi16(ab_lo, cd_lo),
                        _mm256_unpacklo_epi16(ab_hi, cd_hi), _mm256_unpackhi_epi16(ab_hi, cd_hi)};  // bytes 4k..4k+3
  const __m256i m = _mm256_set1_epi8(0x0F);
  __m256i lo[4], hi[4];
  for (int k = 0; k < 4; ++k) {
    lo[k] = _mm256_and_si256(q[k], m);                         // columns 4k..4k+3
    hi[k] = _mm256_and_si256(_mm256_srli_epi16(q[k], 4), m);  // columns 16 + 4k..
  }
  auto* o0 = reinterpret_cast<__m256i*>(codes + g * 128);
  auto* o1 = reinterpret_cast<__m256i*>(codes + (g + 1) * 128);
  _mm256_storeu_si256(o0, _mm256_permute2x128_si256(lo[0], lo[1], 0x20));
  _mm256_storeu_si256(o0 + 1, _mm256_permute2x128_si256(lo[2], lo[3], 0x20));
  _mm256_storeu_si256(o0 + 2, _mm256_permute2x128_si256(hi[0], hi[1], 0x20));
  _mm256_storeu_si256(o0 + 3, _mm256_permute2x128_si256(hi[2], hi[3], 0x20));
  _mm256_storeu_si256(o1, _mm256_permute2x128_si256(lo[0], lo[1], 0x31));
  _mm256_storeu_si256(o1 + 1, _mm256_permute2x128_si256(lo[2], lo[3], 0x31));
  _mm256_storeu_si256(o1 + 2, _mm256_permute2x128_si256(hi[0], hi[1], 0x31));
  _mm256_storeu_si256(o1 + 3, _mm256_permute2x128_si256(hi[2], hi[3], 0x31));
}

// q6_k's 2 high bits (8 bytes a step: byte c holds columns c, c + 8, c + 16, c + 24 from
// bit 0) ORed into group g's codes at bits 4-5.
inline void high_bits_group(const std::uint8_t* high, int g, std::uint8_t* codes) {
  const std::uint8_t* r = high + g * 32;
  auto l64 = [](const std::uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); };
  const __m128i ab = _mm_unpacklo_epi8(l64(r), l64(r + 8)), cd = _mm_unpacklo_epi8(l64(r + 16), l64(r + 24));
  const __m256i t = _mm256_set_m128i(_mm_unpackhi_epi16(ab, cd), _mm_unpacklo_epi16(ab, cd));  // [byte c 0..7][4 steps]
  const __m256i three = _mm256_set1_epi8(3);
  auto* o = reinterpret_cast<__m256i*>(codes + g * 128);
  for (int k = 0; k < 4; ++k) {  // columns 8k..8k+7: bits 2k, 2k + 1
    const __m256i h = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(t, 2 * k), three), 4);
    _mm256_storeu_si256(o + k, _mm256_or_si256(_mm256_loadu_si256(o + k), h));
  }
}

inline void unpack_codes_x86(const IntFormat& f, const std::uint32_t* src, std::uint8_t* codes) {
  if (f.dtype == DType::q8_0) {
    const auto* q = reinterpret_cast<const std::uint8_t*>(src + 32);
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    auto row = [&](int s) {
      return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + s * 32)), flip);
    };
    for (int g = 0; g < 8; ++g) transpose_4x32(row(4 * g), row(4 * g + 1), row(4 * g + 2), row(4 * g + 3), codes + g * 128);
    return;
  }
  const auto* nib = reinterpret_cast<const std::uint8_t*>(src + (f.dtype == DType::q4_k ? 192 : 160));
  for (int g = 0; g < 64; g += 2) nibble_groups(nib, g, codes);
  if (f.dtype == DType::q4_k) return;
  const auto* high = reinterpret_cast<const std::uint8_t*>(src + 1184);
  for (int g = 0; g < 64; ++g) high_bits_group(high, g, codes);
}

// unpack_int with the codes transposed in registers.
inline void unpack_int_x86(const IntFormat& f, const std::uint32_t* src, std::uint32_t* dst) {
  unpack_scales(f, src, dst);
  unpack_codes_x86(f, src, reinterpret_cast<std::uint8_t*>(dst));
}

}  // namespace
}  // namespace ringattn::kernels
