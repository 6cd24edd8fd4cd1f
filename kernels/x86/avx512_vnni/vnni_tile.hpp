// The integer block tile on AVX512-VNNI (kernels/int_ops.hpp's arithmetic): vpdpbusd
// multiplies a group's 4 unsigned weight codes by 4 activation bytes into a column's int32
// (16 columns a register, 2 a panel), vpmulld applies a sub-block's scale, vpdpwssd adds the
// side sums' int16 pairs times their coefficients; tiles of up to 4 rows (8 dot, 8 sum and 8
// fp32 accumulators). The fp32 steps are int_ops.hpp's, one instruction each (no FMA), so
// the bits are the portable loop's. One template over where a block's numbers come from:
// ScratchSrc (an IntBlock, int_vnni.cpp) or PackedSrc (the packed panel block read and
// transposed in registers, int_vnni_vbmi.cpp). Internal linkage; needs AVX512-VNNI.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/int_ops.hpp"

namespace ringattn::kernels {
namespace {

// An IntBlock's numbers.
struct ScratchSrc {
  const IntFormat& f;
  const std::uint32_t* blk;
  ScratchSrc(const IntFormat& fmt, const std::uint32_t* b) : f(fmt), blk(b) {}
  void codes(int g, __m512i& w0, __m512i& w1) const {
    const auto* c = reinterpret_cast<const std::uint8_t*>(blk) + g * 128;
    w0 = _mm512_loadu_si512(c);
    w1 = _mm512_loadu_si512(c + 64);
  }
  void scales(int j, __m512i& s0, __m512i& s1) const {
    const std::uint32_t* s = blk + f.sc_at + j * 32;
    s0 = _mm512_loadu_si512(s);
    s1 = _mm512_loadu_si512(s + 16);
  }
  void coef(int p, __m512i& c0, __m512i& c1) const {
    const std::uint32_t* c = blk + f.coef_at + p * 32;
    c0 = _mm512_loadu_si512(c);
    c1 = _mm512_loadu_si512(c + 16);
  }
  __m512 d(int h) const { return _mm512_loadu_ps(reinterpret_cast<const float*>(blk + f.d_at) + 16 * h); }
  __m512 dmin(int h) const { return _mm512_loadu_ps(reinterpret_cast<const float*>(blk + f.dmin_at) + 16 * h); }
};

inline __m512i bcast32(const void* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Kind: 0 q8_0, 1 q4_k, 2 q6_k. Src reads one block's codes, scales and coefficients
// (ScratchSrc: an IntBlock; int_vnni_vbmi.cpp's PackedSrc: the packed panel block itself);
// stride: words from one block to the next.
template <int M, int Kind, class Src>
void tile_vnni_m(const IntFormat& f, const IntRowsView& x, const std::uint32_t* w, std::int64_t stride,
                 std::int64_t blocks, const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  __m512 acc[M][2];
  for (int i = 0; i < M; ++i)
    for (int h = 0; h < 2; ++h) acc[i][h] = a ? _mm512_loadu_ps(a + i * lda + h * 16) : _mm512_setzero_ps();
  constexpr int kSubs = Kind == 0 ? 1 : Kind == 1 ? 8 : 16;
  constexpr int kPerSub = Kind == 0 ? 8 : Kind == 1 ? 8 : 4;  // groups of 4 steps a sub-block
  constexpr int kBlock = Kind == 0 ? 32 : 256;
  constexpr int kExtra = Kind == 0 ? 1 : Kind == 1 ? 4 : 8;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const Src src(f, w + b * stride);
    const std::int8_t* q[M];
    const std::int32_t* e[M];
    for (int i = 0; i < M; ++i) {
      q[i] = x.q + i * x.ldq + b * kBlock;
      e[i] = x.extra + i * x.lde + b * kExtra;
    }
    __m512i s[M][2];
    if constexpr (Kind == 0) {
      for (int i = 0; i < M; ++i) s[i][0] = s[i][1] = _mm512_set1_epi32(e[i][0]);
      for (int g = 0; g < 8; ++g) {
        __m512i w0, w1;
        src.codes(g, w0, w1);
        for (int i = 0; i < M; ++i) {
          const __m512i xb = bcast32(q[i] + g * 4);
          s[i][0] = _mm512_dpbusd_epi32(s[i][0], w0, xb);
          s[i][1] = _mm512_dpbusd_epi32(s[i][1], w1, xb);
        }
      }
    } else {
      for (int i = 0; i < M; ++i) s[i][0] = s[i][1] = _mm512_setzero_si512();
      for (int j = 0; j < kSubs; ++j) {
        __m512i dt[M][2];
        for (int i = 0; i < M; ++i) dt[i][0] = dt[i][1] = _mm512_setzero_si512();
        for (int g = j * kPerSub; g < (j + 1) * kPerSub; ++g) {
          __m512i w0, w1;
        src.codes(g, w0, w1);
          for (int i = 0; i < M; ++i) {
            const __m512i xb = bcast32(q[i] + g * 4);
            dt[i][0] = _mm512_dpbusd_epi32(dt[i][0], w0, xb);
            dt[i][1] = _mm512_dpbusd_epi32(dt[i][1], w1, xb);
          }
        }
        __m512i sc0, sc1;
        src.scales(j, sc0, sc1);
        for (int i = 0; i < M; ++i) {
          s[i][0] = _mm512_add_epi32(s[i][0], _mm512_mullo_epi32(dt[i][0], sc0));
          s[i][1] = _mm512_add_epi32(s[i][1], _mm512_mullo_epi32(dt[i][1], sc1));
        }
      }
    }
    const __m512 d0 = src.d(0), d1 = src.d(1);
    auto side_sums = [&] {  // s += sum_p coefficient pairs . side-sum pairs
      for (int p = 0; p < kExtra; ++p) {
        __m512i c0, c1;
        src.coef(p, c0, c1);
        for (int i = 0; i < M; ++i) {
          const __m512i eb = _mm512_set1_epi32(e[i][p]);
          s[i][0] = _mm512_dpwssd_epi32(s[i][0], c0, eb);
          s[i][1] = _mm512_dpwssd_epi32(s[i][1], c1, eb);
        }
      }
    };
    if constexpr (Kind == 2) side_sums();
    __m512 t[M][2];
    for (int i = 0; i < M; ++i) {
      t[i][0] = _mm512_mul_ps(_mm512_cvtepi32_ps(s[i][0]), d0);
      t[i][1] = _mm512_mul_ps(_mm512_cvtepi32_ps(s[i][1]), d1);
    }
    if constexpr (Kind == 1) {  // T -= float(S2) * dmin, S2 = sum_p min pairs . side-sum pairs
      for (int i = 0; i < M; ++i) s[i][0] = s[i][1] = _mm512_setzero_si512();
      side_sums();
      const __m512 m0 = src.dmin(0), m1 = src.dmin(1);
      for (int i = 0; i < M; ++i) {
        t[i][0] = _mm512_sub_ps(t[i][0], _mm512_mul_ps(_mm512_cvtepi32_ps(s[i][0]), m0));
        t[i][1] = _mm512_sub_ps(t[i][1], _mm512_mul_ps(_mm512_cvtepi32_ps(s[i][1]), m1));
      }
    }
    for (int i = 0; i < M; ++i) {
      const __m512 dx = _mm512_set1_ps(x.dx[i * x.ldd + b]);
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_mul_ps(t[i][0], dx));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_mul_ps(t[i][1], dx));
    }
  }
  const __mmask16 k0 = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
  const __mmask16 k1 = static_cast<__mmask16>(cols >= 32 ? 0xFFFF : cols > 16 ? (1u << (cols - 16)) - 1 : 0);
  for (int i = 0; i < M; ++i) {
    float* yr = y + i * ldy;
    __m512 v0 = acc[i][0], v1 = acc[i][1];
    if (add) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(k0, yr), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(k1, yr + 16), v1);
    }
    _mm512_mask_storeu_ps(yr, k0, v0);
    _mm512_mask_storeu_ps(yr + 16, k1, v1);
  }
}

template <int Kind, class Src>
void tile_kind(const IntFormat& f, const IntRowsView& x, int m, const std::uint32_t* w, std::int64_t stride,
               std::int64_t blocks, const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  switch (m) {
    case 1: return tile_vnni_m<1, Kind, Src>(f, x, w, stride, blocks, a, lda, y, ldy, cols, add);
    case 2: return tile_vnni_m<2, Kind, Src>(f, x, w, stride, blocks, a, lda, y, ldy, cols, add);
    case 3: return tile_vnni_m<3, Kind, Src>(f, x, w, stride, blocks, a, lda, y, ldy, cols, add);
    default: return tile_vnni_m<4, Kind, Src>(f, x, w, stride, blocks, a, lda, y, ldy, cols, add);
  }
}

// A block format's tile over blocks `stride` words apart.
template <class Src>
void tile_vnni(const IntFormat& f, const IntRowsView& x, int m, const std::uint32_t* w, std::int64_t stride,
               std::int64_t blocks, const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  switch (f.dtype) {
    case DType::q8_0: return tile_kind<0, Src>(f, x, m, w, stride, blocks, a, lda, y, ldy, cols, add);
    case DType::q4_k: return tile_kind<1, Src>(f, x, m, w, stride, blocks, a, lda, y, ldy, cols, add);
    case DType::q6_k: return tile_kind<2, Src>(f, x, m, w, stride, blocks, a, lda, y, ldy, cols, add);
    case DType::f32:
    case DType::bf16:
    case DType::f16: break;  // not block formats: Linear sends only those
  }
}

}  // namespace
}  // namespace ringattn::kernels
