// Kernel tests' GGUF blocks: q4_k and q6_k blocks built from chosen scales and q as
// llama.cpp's quantize_row_q4_K_ref / _q6_K_ref pack them, their values by the formula, and
// random matrices of them (test_quant_blocks.cpp, test_int_blocks.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ringattn/half.hpp"
#include "ringattn/types.hpp"

namespace ringattn::test {


// One q4_k block from its parts, packed as llama.cpp's quantize_row_q4_K_ref does, and its
// 256 values by the formula: (d * sc[t]) * q[k] - dmin * m[t], t = k / 32.
struct Q4K {
  std::uint16_t d, dmin;
  std::uint8_t sc[8], m[8], q[256];
  std::string bytes() const {
    std::uint8_t s[12] = {};
    for (int j = 0; j < 8; ++j) {
      if (j < 4) {
        s[j] = sc[j];
        s[j + 4] = m[j];
      } else {
        s[j + 4] = static_cast<std::uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
        s[j - 4] |= static_cast<std::uint8_t>((sc[j] >> 4) << 6);
        s[j] |= static_cast<std::uint8_t>((m[j] >> 4) << 6);
      }
    }
    std::string b(reinterpret_cast<const char*>(&d), 2);
    b.append(reinterpret_cast<const char*>(&dmin), 2);
    b.append(reinterpret_cast<const char*>(s), 12);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) b += static_cast<char>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    return b;
  }
  float value(int k) const {
    const float d1 = from_f16(d) * static_cast<float>(sc[k / 32]), m1 = from_f16(dmin) * static_cast<float>(m[k / 32]);
    return d1 * static_cast<float>(q[k]) - m1;
  }
};

// One q6_k block: (d * sc[k / 16]) * (q[k] - 32), q 6 bits, packed as llama.cpp's
// quantize_row_q6_K_ref does (ql: low nibbles, qh: 2 high bits a value, then scales, d).
struct Q6K {
  std::uint16_t d;
  std::int8_t sc[16];
  std::uint8_t q[256];
  std::string bytes() const {
    std::uint8_t ql[128], qh[64];
    for (int j = 0; j < 2; ++j)
      for (int l = 0; l < 32; ++l) {
        const std::uint8_t* L = q + 128 * j;
        ql[64 * j + l] = static_cast<std::uint8_t>((L[l] & 0xF) | ((L[l + 64] & 0xF) << 4));
        ql[64 * j + l + 32] = static_cast<std::uint8_t>((L[l + 32] & 0xF) | ((L[l + 96] & 0xF) << 4));
        qh[32 * j + l] = static_cast<std::uint8_t>((L[l] >> 4) | ((L[l + 32] >> 4) << 2) | ((L[l + 64] >> 4) << 4) |
                                                   ((L[l + 96] >> 4) << 6));
      }
    std::string b(reinterpret_cast<const char*>(ql), 128);
    b.append(reinterpret_cast<const char*>(qh), 64);
    b.append(reinterpret_cast<const char*>(sc), 16);
    b.append(reinterpret_cast<const char*>(&d), 2);
    return b;
  }
  float value(int k) const {
    const float ds = from_f16(d) * static_cast<float>(sc[k / 16]);
    return ds * static_cast<float>(static_cast<int>(q[k]) - 32);
  }
};

inline Q4K random_q4k(std::mt19937& rng) {
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
  Q4K b{to_f16(scale(rng)), to_f16(scale(rng)), {}, {}, {}};
  for (int t = 0; t < 8; ++t) {
    b.sc[t] = static_cast<std::uint8_t>(rng() % 64);
    b.m[t] = static_cast<std::uint8_t>(rng() % 64);
  }
  for (auto& v : b.q) v = static_cast<std::uint8_t>(rng() % 16);
  return b;
}

inline Q6K random_q6k(std::mt19937& rng) {
  std::uniform_real_distribution<float> scale(1e-5f, 1e-3f);
  Q6K b{to_f16(scale(rng)), {}, {}};
  for (auto& s : b.sc) s = static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
  for (auto& v : b.q) v = static_cast<std::uint8_t>(rng() % 64);
  return b;
}

// A [rows, in] matrix of random blocks of `d` (q4_k or q6_k), its file bytes and values.
struct Matrix {
  std::string bytes;
  std::vector<float> values;
};
inline Matrix random_matrix(DType d, std::int64_t rows, std::int64_t in, unsigned seed) {
  std::mt19937 rng(seed);
  Matrix m;
  for (std::int64_t b = 0; b < rows * in / 256; ++b) {
    if (d == DType::q4_k) {
      const Q4K q = random_q4k(rng);
      m.bytes += q.bytes();
      for (int k = 0; k < 256; ++k) m.values.push_back(q.value(k));
    } else {
      const Q6K q = random_q6k(rng);
      m.bytes += q.bytes();
      for (int k = 0; k < 256; ++k) m.values.push_back(q.value(k));
    }
  }
  return m;
}

inline std::vector<float> randn(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}


}  // namespace ringattn::test
