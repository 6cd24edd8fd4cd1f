// ringattn kernels — a packed panel block of GGUF's block formats (kernels/quant_blocks.hpp)
// unpacked to the [steps][32] fp32 the panel loops read. Included by each ISA path's linear
// file, so the compiler vectorises it for that path (each copy has internal linkage: a
// function built with AVX-512 flags never stands in for the generic one). Every value is
// one product, or one product and one subtraction of an exact product, so every path and
// the file reader (decode_block) give the same bits.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ringattn/types.hpp"

namespace ringattn::kernels {
namespace {  // internal linkage: one copy per ISA path

// A type with no packed-panel decoder reached a block format's loop: says so on stderr,
// naming the type, and aborts (kernels are noexcept; Linear checks types at its boundary).
[[noreturn]] inline void refuse_panel_type(DType d) noexcept {
  std::fprintf(stderr, "ringattn kernels: dtype %d has no packed panel block decoder (q8_0, q4_k, q6_k)\n",
               static_cast<int>(d));
  std::abort();
}

// q8_0: d[32] | int8 q [32 steps][32].
inline void unpack_q8_0(const std::uint32_t* src, float* out) {
  float d[32];
  std::memcpy(d, src, sizeof d);
  const auto* q = reinterpret_cast<const std::int8_t*>(src + 32);
  for (int s = 0; s < 32; ++s)
    for (int c = 0; c < 32; ++c) out[s * 32 + c] = d[c] * static_cast<float>(q[s * 32 + c]);
}

// q4_k: d[32], dmin[32] | scale u8 [8][32] | min u8 [8][32] | nibbles [256][16].
inline void unpack_q4_k(const std::uint32_t* src, float* out) {
  float d[32], dmin[32];
  std::memcpy(d, src, sizeof d);
  std::memcpy(dmin, src + 32, sizeof dmin);
  const auto* scale = reinterpret_cast<const std::uint8_t*>(src + 64);
  const auto* min = reinterpret_cast<const std::uint8_t*>(src + 128);
  const auto* nib = reinterpret_cast<const std::uint8_t*>(src + 192);
  for (int t = 0; t < 8; ++t) {
    float d1[32], m1[32];
    for (int c = 0; c < 32; ++c) {
      d1[c] = d[c] * static_cast<float>(scale[t * 32 + c]);
      m1[c] = dmin[c] * static_cast<float>(min[t * 32 + c]);
    }
    for (int s = t * 32; s < t * 32 + 32; ++s) {
      const std::uint8_t* b = nib + s * 16;
      float* o = out + s * 32;
      for (int c = 0; c < 16; ++c) o[c] = d1[c] * static_cast<float>(b[c] & 0xF) - m1[c];
      for (int c = 0; c < 16; ++c) o[c + 16] = d1[c + 16] * static_cast<float>(b[c] >> 4) - m1[c + 16];
    }
  }
}

// q6_k: d[32] | scale int8 [16][32] | low nibbles [256][16] | high 2 bits [256][8].
inline void unpack_q6_k(const std::uint32_t* src, float* out) {
  float d[32];
  std::memcpy(d, src, sizeof d);
  const auto* scale = reinterpret_cast<const std::int8_t*>(src + 32);
  const auto* nib = reinterpret_cast<const std::uint8_t*>(src + 160);
  const auto* high = reinterpret_cast<const std::uint8_t*>(src + 1184);
  for (int u = 0; u < 16; ++u) {
    float ds[32];
    for (int c = 0; c < 32; ++c) ds[c] = d[c] * static_cast<float>(scale[u * 32 + c]);
    for (int s = u * 16; s < u * 16 + 16; ++s) {
      const std::uint8_t* b = nib + s * 16;
      const std::uint8_t* h = high + s * 8;
      float* o = out + s * 32;
      int q[32];
      for (int c = 0; c < 16; ++c) {
        q[c] = b[c] & 0xF;
        q[c + 16] = b[c] >> 4;
      }
      for (int g = 0; g < 4; ++g)
        for (int c = 0; c < 8; ++c) q[g * 8 + c] |= ((h[c] >> (2 * g)) & 3) << 4;
      for (int c = 0; c < 32; ++c) o[c] = ds[c] * static_cast<float>(q[c] - 32);
    }
  }
}

// A packed panel block of `d` (q8_0, q4_k or q6_k) as out[step * 32 + column]. Linear
// sends only the panels of a type whose tensor-type row says LinearPath::blocks; anything
// else here is a bug in the caller, and stops the process rather than being read as
// another format's blocks. The switch names every DType (-Wswitch): a new block format
// cannot pass through without its decoder.
inline void unpack_panel_block(DType d, const std::uint32_t* src, float* out) noexcept {
  switch (d) {
    case DType::q8_0: return unpack_q8_0(src, out);
    case DType::q4_k: return unpack_q4_k(src, out);
    case DType::q6_k: return unpack_q6_k(src, out);
    case DType::f32:
    case DType::bf16:
    case DType::f16: break;  // not block formats: Linear's f32, bf16, f16 paths
  }
  refuse_panel_type(d);
}

}  // namespace
}  // namespace ringattn::kernels
