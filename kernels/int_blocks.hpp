// ringattn kernels — the integer block arithmetic's portable loops (kernels/int_ops.hpp):
// activation quantization, a packed panel block to its IntBlock, and the tile. Included by
// each ISA path's int file, so the compiler vectorises them for that path (internal
// linkage: a copy built with AVX-512 flags never stands in for the generic one). Every
// fp32 step is written once here in the order int_ops.hpp gives, and every int file is
// compiled with -ffp-contract=off (kernels/meson.build: no multiply and add fused into an
// FMA on one path and not another), so every copy gives the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/int_ops.hpp"

namespace ringattn::kernels {
namespace {  // internal linkage: one copy per ISA path

// One block of n values: q, and dx (see int_ops.hpp).
inline float quantize_block(const float* v, int n, std::int8_t* q) {
  float amax = 0;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(v[i]);
    finite = finite && a <= std::numeric_limits<float>::max();
    amax = a > amax ? a : amax;
  }
  if (!finite) {
    std::memset(q, 0, static_cast<std::size_t>(n));
    return std::numeric_limits<float>::quiet_NaN();
  }
  if (amax == 0) {
    std::memset(q, 0, static_cast<std::size_t>(n));
    return 0;
  }
  // Divided, not multiplied by 127 / amax: that reciprocal overflows to infinity for an amax
  // below ~3.7e-37 (a block of denormals), where v / dx stays within 127.
  const float dx = amax / 127.0f;
  constexpr float kMagic = 12582912.0f;
  for (int i = 0; i < n; ++i) {
    // Nearest even by the adder (|v / dx| <= 127 * (1 + 2^-22)); the two steps spelled out so
    // the loop vectorises and every copy rounds the same way.
    const float s = v[i] / dx;
    const float r = (s + kMagic) - kMagic;
    q[i] = static_cast<std::int8_t>(std::clamp(static_cast<int>(r), -127, 127));
  }
  return dx;
}

inline void quantize_rows(const IntFormat& f, const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t in,
                   const IntRows& out) {
  const std::int64_t blocks = in / f.block;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    std::int8_t* q = out.q + r * out.ldq;
    float* dx = out.dx + r * out.ldd;
    std::int32_t* extra = out.extra + r * out.lde;
    for (std::int64_t b = 0; b < blocks; ++b) {
      std::int8_t* qb = q + b * f.block;
      dx[b] = quantize_block(xr + b * f.block, f.block, qb);
      std::int32_t* e = extra + b * f.extra;
      if (f.dtype == DType::q8_0) {
        std::int32_t s = 0;
        for (int i = 0; i < 32; ++i) s += qb[i];
        e[0] = -128 * s;
      } else {
        const int per = f.block / (2 * f.extra);  // values per side sum: 32 (q4_k), 16 (q6_k)
        for (int p = 0; p < f.extra; ++p) {
          std::int32_t s0 = 0, s1 = 0;
          for (int i = 0; i < per; ++i) {
            s0 += qb[(2 * p) * per + i];
            s1 += qb[(2 * p + 1) * per + i];
          }
          e[p] = static_cast<std::int32_t>((static_cast<std::uint32_t>(s0) & 0xFFFFu) | static_cast<std::uint32_t>(s1) << 16);
        }
      }
    }
  }
}

// An IntBlock's scales and coefficients (everything but the codes) from a packed panel
// block (kernels/quant_blocks.hpp's layouts).
inline void unpack_scales(const IntFormat& f, const std::uint32_t* src, std::uint32_t* dst) {
  std::memcpy(dst + f.d_at, src, 32 * 4);
  if (f.dtype == DType::q8_0) return;
  auto* sc = reinterpret_cast<std::int32_t*>(dst + f.sc_at);
  std::uint32_t* coef = dst + f.coef_at;
  if (f.dtype == DType::q4_k) {
    std::memcpy(dst + f.dmin_at, src + 32, 32 * 4);
    const auto* scale = reinterpret_cast<const std::uint8_t*>(src + 64);
    const auto* min = reinterpret_cast<const std::uint8_t*>(src + 128);
    for (int j = 0; j < 8; ++j)
      for (int c = 0; c < 32; ++c) sc[j * 32 + c] = scale[j * 32 + c];
    for (int p = 0; p < 4; ++p)
      for (int c = 0; c < 32; ++c) coef[p * 32 + c] = min[(2 * p) * 32 + c] | static_cast<std::uint32_t>(min[(2 * p + 1) * 32 + c]) << 16;
    return;
  }
  const auto* scale = reinterpret_cast<const std::int8_t*>(src + 32);  // q6_k
  for (int j = 0; j < 16; ++j)
    for (int c = 0; c < 32; ++c) sc[j * 32 + c] = scale[j * 32 + c];
  for (int p = 0; p < 8; ++p)
    for (int c = 0; c < 32; ++c)
      coef[p * 32 + c] = (static_cast<std::uint32_t>(-32 * scale[(2 * p) * 32 + c]) & 0xFFFFu) |
                         static_cast<std::uint32_t>(-32 * scale[(2 * p + 1) * 32 + c]) << 16;
}

// An IntBlock's codes, codes[g][c][i] = u at step 4g + i, column c, from a packed panel block.
inline void unpack_codes(const IntFormat& f, const std::uint32_t* src, std::uint8_t* codes) {
  if (f.dtype == DType::q8_0) {
    const auto* q = reinterpret_cast<const std::uint8_t*>(src + 32);  // int8 [32 steps][32]
    for (int s = 0; s < 32; ++s)
      for (int c = 0; c < 32; ++c) codes[(s / 4) * 128 + c * 4 + s % 4] = static_cast<std::uint8_t>(q[s * 32 + c] ^ 0x80u);
    return;
  }
  const auto* nib = reinterpret_cast<const std::uint8_t*>(src + (f.dtype == DType::q4_k ? 192 : 160));
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 16; ++c) {
      const std::uint8_t b = nib[s * 16 + c];
      codes[(s / 4) * 128 + c * 4 + s % 4] = b & 0xF;
      codes[(s / 4) * 128 + (c + 16) * 4 + s % 4] = b >> 4;
    }
  if (f.dtype == DType::q4_k) return;
  const auto* high = reinterpret_cast<const std::uint8_t*>(src + 1184);  // q6_k: 2 high bits
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 32; ++c)
      codes[(s / 4) * 128 + c * 4 + s % 4] |= static_cast<std::uint8_t>(((high[s * 8 + c % 8] >> (2 * (c / 8))) & 3) << 4);
}

// A packed panel block as an IntBlock.
inline void unpack_int(const IntFormat& f, const std::uint32_t* src, std::uint32_t* dst) {
  unpack_scales(f, src, dst);
  unpack_codes(f, src, reinterpret_cast<std::uint8_t*>(dst));
}

// The int16 pair sums of a coefficient word and a side-sum word (vpdpwssd's step).
inline std::int32_t pair_dot(std::uint32_t coef, std::uint32_t sums) {
  return static_cast<std::int16_t>(coef & 0xFFFFu) * static_cast<std::int16_t>(sums & 0xFFFFu) +
         static_cast<std::int16_t>(coef >> 16) * static_cast<std::int16_t>(sums >> 16);
}

// The portable tile: one row at a time, 32 columns a step (what the compiler vectorises).
inline void tile_portable(const IntFormat& f, const IntRowsView& x, int m, const std::uint32_t* w, std::int64_t blocks,
                   const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  const int subs = f.block / f.sub, per_sub = f.sub / 4;
  for (int i = 0; i < m; ++i) {
    float acc[32];
    for (int c = 0; c < 32; ++c) acc[c] = a ? a[i * lda + c] : 0.0f;
    const std::int8_t* q = x.q + i * x.ldq;
    const float* dx = x.dx + i * x.ldd;
    const std::int32_t* extra = x.extra + i * x.lde;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::uint32_t* blk = w + b * f.block_words;
      const auto* codes = reinterpret_cast<const std::uint8_t*>(blk);
      const auto* d = reinterpret_cast<const float*>(blk + f.d_at);
      const std::int8_t* qb = q + b * f.block;
      const std::int32_t* e = extra + b * f.extra;
      std::int32_t s1[32] = {};
      for (int j = 0; j < subs; ++j) {
        std::int32_t dot[32] = {};
        for (int g = j * per_sub; g < (j + 1) * per_sub; ++g) {
          const std::uint8_t* cg = codes + g * 128;
          const std::int8_t* qg = qb + g * 4;
          for (int c = 0; c < 32; ++c)
            dot[c] += cg[c * 4] * qg[0] + cg[c * 4 + 1] * qg[1] + cg[c * 4 + 2] * qg[2] + cg[c * 4 + 3] * qg[3];
        }
        if (f.dtype == DType::q8_0) {
          for (int c = 0; c < 32; ++c) s1[c] = dot[c];
        } else {
          const auto* sc = reinterpret_cast<const std::int32_t*>(blk + f.sc_at) + j * 32;
          for (int c = 0; c < 32; ++c) s1[c] += sc[c] * dot[c];
        }
      }
      float t[32];
      if (f.dtype == DType::q8_0) {
        for (int c = 0; c < 32; ++c) t[c] = static_cast<float>(s1[c] + e[0]) * d[c];
      } else {
        std::int32_t s2[32] = {};
        const std::uint32_t* coef = blk + f.coef_at;
        for (int p = 0; p < f.extra; ++p)
          for (int c = 0; c < 32; ++c) s2[c] += pair_dot(coef[p * 32 + c], static_cast<std::uint32_t>(e[p]));
        if (f.dtype == DType::q4_k) {
          const auto* dmin = reinterpret_cast<const float*>(blk + f.dmin_at);
          for (int c = 0; c < 32; ++c) t[c] = static_cast<float>(s1[c]) * d[c] - static_cast<float>(s2[c]) * dmin[c];
        } else {
          for (int c = 0; c < 32; ++c) t[c] = static_cast<float>(s1[c] + s2[c]) * d[c];
        }
      }
      for (int c = 0; c < 32; ++c) acc[c] = acc[c] + t[c] * dx[b];
    }
    float* yr = y + i * ldy;
    for (int c = 0; c < cols; ++c) yr[c] = add ? yr[c] + acc[c] : acc[c];
  }
}

}  // namespace
}  // namespace ringattn::kernels
