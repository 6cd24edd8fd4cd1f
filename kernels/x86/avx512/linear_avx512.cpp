// The AVX-512 paths of the weight matmul's panel loop (kernels/linear_ops.hpp): a register
// tile of up to 12 rows x 32 columns (24 accumulators), per k two weight vectors and one
// broadcast of x per row. bf16 pairs (weights and x) go through the AVX512-BF16 dot
// instruction where the CPU has it (kLinearAvx512Bf16: one instruction per pair, twice the
// fp32 rate), else widen in registers (a shift for the even step, an AND for the odd one)
// into two FMAs in the instruction's order (kLinearAvx512). f16 weights widen in
// registers (vcvtph2ps) into the f32 loops. The weights are never stored as fp32.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/linear_ops.hpp"
#include "kernels/quant_unpack.hpp"

namespace ringattn::kernels {
namespace {

constexpr int kRows = 12;
constexpr int kRowsBf16 = 8;  // the widened pairs need registers of their own

template <int M>
inline void start(__m512 (&acc)[M][2], const float* a, std::int64_t lda, int cols) {
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : __mmask16(0);
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
    acc[i][0] = a ? _mm512_maskz_loadu_ps(m0, a + i * lda) : _mm512_setzero_ps();
    acc[i][1] = a ? _mm512_maskz_loadu_ps(m1, a + i * lda + 16) : _mm512_setzero_ps();
  }
}

template <int M>
inline void finish(__m512 (&acc)[M][2], float* y, std::int64_t ldy, int cols, bool add) {
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : __mmask16(0);
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
    float* yi = y + i * ldy;
    __m512 a0 = acc[i][0], a1 = acc[i][1];
    if (add) {
      a0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, yi), a0);
      a1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, yi + 16), a1);
    }
    _mm512_mask_storeu_ps(yi, m0, a0);
    _mm512_mask_storeu_ps(yi + 16, m1, a1);
  }
}

template <int M>
inline void step(__m512 (&acc)[M][2], const float* x, std::int64_t ldx, std::int64_t s, __m512 w0, __m512 w1) {
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
    const __m512 a = _mm512_set1_ps(x[i * ldx + s]);
    acc[i][0] = _mm512_fmadd_ps(a, w0, acc[i][0]);
    acc[i][1] = _mm512_fmadd_ps(a, w1, acc[i][1]);
  }
}

// 16 weights as floats: f32 loaded, f16 widened (exact).
inline __m512 load16(const float* w) { return _mm512_loadu_ps(w); }
inline __m512 load16(const std::uint16_t* w) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
}

template <int M, class W>
void panel_f32_m(const float* x, std::int64_t ldx, const W* w, std::int64_t k, const float* a, std::int64_t lda,
                 float* y, std::int64_t ldy, int cols, bool add) {
  __m512 acc[M][2];
  start<M>(acc, a, lda, cols);
  for (std::int64_t s = 0; s < k; ++s) {
    const W* ws = w + s * kPanel;
    step<M>(acc, x, ldx, s, load16(ws), load16(ws + 16));
  }
  finish<M>(acc, y, ldy, cols, add);
}

// One pair p of bf16 steps for M rows: weights v0 (columns 0-15), v1 (16-31).
template <int M>
inline void fold_pair(__m512 (&acc)[M][2], const std::uint32_t* x, std::int64_t ldx, std::int64_t p, __m512i v0,
                      __m512i v1) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, high)), o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, high));
  const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), e1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
    const __m512i xp = _mm512_set1_epi32(static_cast<int>(x[i * ldx + p]));
    const __m512 xo = _mm512_castsi512_ps(_mm512_and_si512(xp, high)), xe = _mm512_castsi512_ps(_mm512_slli_epi32(xp, 16));
    acc[i][0] = _mm512_fmadd_ps(xo, o0, acc[i][0]);
    acc[i][1] = _mm512_fmadd_ps(xo, o1, acc[i][1]);
    acc[i][0] = _mm512_fmadd_ps(xe, e0, acc[i][0]);
    acc[i][1] = _mm512_fmadd_ps(xe, e1, acc[i][1]);
  }
}

template <int M>
void panel_bf16_m(const std::uint32_t* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t k, const float* a,
                  std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  __m512 acc[M][2];
  start<M>(acc, a, lda, cols);
  for (std::int64_t p = 0; p < (k + 1) / 2; ++p) {
    const std::uint32_t* ws = w + p * kPanel;
    fold_pair<M>(acc, x, ldx, p, _mm512_loadu_si512(ws), _mm512_loadu_si512(ws + 16));
  }
  finish<M>(acc, y, ldy, cols, add);
}

// Few rows over kWide full panels at once: M rows x 8 vectors of accumulators.
constexpr int kWide = 4, kWideRows = 3;

template <int M, int V>
inline void wide_start_n(__m512 (&acc)[M][V], const float* a, std::int64_t lda) {
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[i][v] = a ? _mm512_loadu_ps(a + i * lda + 16 * v) : _mm512_setzero_ps();
}
template <int M>
inline void wide_start(__m512 (&acc)[M][2 * kWide], const float* a, std::int64_t lda) {
  wide_start_n<M, 2 * kWide>(acc, a, lda);
}

template <int M, int V>
inline void wide_finish_n(__m512 (&acc)[M][V], float* y, std::int64_t ldy, bool add) {
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      float* yv = y + i * ldy + 16 * v;
      _mm512_storeu_ps(yv, add ? _mm512_add_ps(_mm512_loadu_ps(yv), acc[i][v]) : acc[i][v]);
    }
}
template <int M>
inline void wide_finish(__m512 (&acc)[M][2 * kWide], float* y, std::int64_t ldy, bool add) {
  wide_finish_n<M, 2 * kWide>(acc, y, ldy, add);
}

template <int M, class W>
void wide_f32_m(const float* x, std::int64_t ldx, const W* w, std::int64_t stride, std::int64_t k, const float* a,
                std::int64_t lda, float* y, std::int64_t ldy, bool add) {
  __m512 acc[M][2 * kWide];
  wide_start<M>(acc, a, lda);
  for (std::int64_t s = 0; s < k; ++s) {
    __m512 xi[M];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) xi[i] = _mm512_set1_ps(x[i * ldx + s]);
#pragma GCC unroll 8
    for (int v = 0; v < 2 * kWide; ++v) {
      const __m512 wv = load16(w + (v / 2) * stride + s * kPanel + 16 * (v % 2));
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) acc[i][v] = _mm512_fmadd_ps(xi[i], wv, acc[i][v]);
    }
  }
  wide_finish<M>(acc, y, ldy, add);
}

template <int M>
void wide_bf16_m(const std::uint32_t* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t stride, std::int64_t k,
                 const float* a, std::int64_t lda, float* y, std::int64_t ldy, bool add) {
  __m512 acc[M][2 * kWide];
  wide_start<M>(acc, a, lda);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (std::int64_t p = 0; p < (k + 1) / 2; ++p) {
    __m512 xo[M], xe[M];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m512i xp = _mm512_set1_epi32(static_cast<int>(x[i * ldx + p]));
      xo[i] = _mm512_castsi512_ps(_mm512_and_si512(xp, high));
      xe[i] = _mm512_castsi512_ps(_mm512_slli_epi32(xp, 16));
    }
#pragma GCC unroll 8
    for (int v = 0; v < 2 * kWide; ++v) {
      const __m512i raw = _mm512_loadu_si512(w + (v / 2) * stride + p * kPanel + 16 * (v % 2));
      const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(raw, high)), we = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) {
        acc[i][v] = _mm512_fmadd_ps(xo[i], wo, acc[i][v]);
        acc[i][v] = _mm512_fmadd_ps(xe[i], we, acc[i][v]);
      }
    }
  }
  wide_finish<M>(acc, y, ldy, add);
}

// The same loops with the AVX512-BF16 dot instruction (chosen only on CPUs that have it).
#pragma GCC push_options
#pragma GCC target("avx512bf16")

template <int M>
void panel_dot_m(const std::uint32_t* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t k, const float* a,
                 std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  __m512 acc[M][2];
  start<M>(acc, a, lda, cols);
  for (std::int64_t p = 0; p < (k + 1) / 2; ++p) {
    const std::uint32_t* ws = w + p * kPanel;
    const __m512bh v0 = (__m512bh)_mm512_loadu_si512(ws), v1 = (__m512bh)_mm512_loadu_si512(ws + 16);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m512bh xp = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[i * ldx + p]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], xp, v0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], xp, v1);
    }
  }
  finish<M>(acc, y, ldy, cols, add);
}

template <int M>
void wide_dot_m(const std::uint32_t* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t stride, std::int64_t k,
                const float* a, std::int64_t lda, float* y, std::int64_t ldy, bool add) {
  __m512 acc[M][2 * kWide];
  wide_start<M>(acc, a, lda);
  for (std::int64_t p = 0; p < (k + 1) / 2; ++p) {
    __m512bh xp[M];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) xp[i] = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[i * ldx + p]));
#pragma GCC unroll 8
    for (int v = 0; v < 2 * kWide; ++v) {
      const __m512bh wv = (__m512bh)_mm512_loadu_si512(w + (v / 2) * stride + p * kPanel + 16 * (v % 2));
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], xp[i], wv);
    }
  }
  wide_finish<M>(acc, y, ldy, add);
}

#pragma GCC pop_options

// Block formats, few rows: each step's weight vectors unpacked in registers as
// kernels/quant_unpack.hpp computes them (the same expressions), then the f32 loop's
// multiply-adds in its order: the bits of unpack + panel_f32_m. N panels side by side (N =
// 2 for up to kQuantWideRows rows: one row's two chains a panel wait on the FMA latency, four
// do not), each over its own blocks at `stride` words.
constexpr int kQuantRows = 8, kQuantWideRows = 4;

inline __m512i widen_u8(const std::uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512 floats_u8(const std::uint8_t* p) { return _mm512_cvtepi32_ps(widen_u8(p)); }
inline __m512 floats_i8(const std::int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// acc[i][v] += x[i][s] * w[v] for M rows and V vectors, rows outermost (the f32 loop's order
// within each accumulator: one multiply-add per step).
template <int M, int V>
inline void step_v(__m512 (&acc)[M][V], const float* x, std::int64_t ldx, std::int64_t s, const __m512 (&w)[V]) {
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    const __m512 a = _mm512_set1_ps(x[i * ldx + s]);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(a, w[v], acc[i][v]);
  }
}

// q8_0: d[32] | int8 q [32 steps][32].
template <int M, int N>
inline void fold_q8_0(__m512 (&acc)[M][2 * N], const float* x, std::int64_t ldx, const std::uint32_t* src,
                      std::int64_t stride) {
  __m512 d[2 * N];
#pragma GCC unroll 4
  for (int v = 0; v < 2 * N; ++v) d[v] = _mm512_loadu_ps(reinterpret_cast<const float*>(src + (v / 2) * stride) + 16 * (v % 2));
  for (int s = 0; s < 32; ++s) {
    __m512 w[2 * N];
#pragma GCC unroll 4
    for (int v = 0; v < 2 * N; ++v)
      w[v] = _mm512_mul_ps(d[v], floats_i8(reinterpret_cast<const std::int8_t*>(src + (v / 2) * stride + 32) + s * 32 +
                                           16 * (v % 2)));
    step_v<M, 2 * N>(acc, x, ldx, s, w);
  }
}

// q4_k: d[32], dmin[32] | scale u8 [8][32] | min u8 [8][32] | nibbles [256][16].
template <int M, int N>
inline void fold_q4_k(__m512 (&acc)[M][2 * N], const float* x, std::int64_t ldx, const std::uint32_t* src,
                      std::int64_t stride) {
  const __m512i low = _mm512_set1_epi32(0xF);
  for (int t = 0; t < 8; ++t) {
    __m512 sc[2 * N], mn[2 * N];
#pragma GCC unroll 4
    for (int v = 0; v < 2 * N; ++v) {
      const std::uint32_t* b = src + (v / 2) * stride;
      const int h = 16 * (v % 2);
      sc[v] = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(b) + h),
                            floats_u8(reinterpret_cast<const std::uint8_t*>(b + 64) + t * 32 + h));
      mn[v] = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(b + 32) + h),
                            floats_u8(reinterpret_cast<const std::uint8_t*>(b + 128) + t * 32 + h));
    }
    for (int s = t * 32; s < t * 32 + 32; ++s) {
      __m512 w[2 * N];
#pragma GCC unroll 2
      for (int n = 0; n < N; ++n) {
        const __m512i raw = widen_u8(reinterpret_cast<const std::uint8_t*>(src + n * stride + 192) + s * 16);
        const __m512 q0 = _mm512_cvtepi32_ps(_mm512_and_si512(raw, low)), q1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(raw, 4));
        w[2 * n] = _mm512_sub_ps(_mm512_mul_ps(sc[2 * n], q0), mn[2 * n]);
        w[2 * n + 1] = _mm512_sub_ps(_mm512_mul_ps(sc[2 * n + 1], q1), mn[2 * n + 1]);
      }
      step_v<M, 2 * N>(acc, x, ldx, s, w);
    }
  }
}

// q6_k: d[32] | scale int8 [16][32] | low nibbles [256][16] | high 2 bits [256][8] (byte c:
// columns c, c + 8, c + 16, c + 24 from bit 0).
template <int M, int N>
inline void fold_q6_k(__m512 (&acc)[M][2 * N], const float* x, std::int64_t ldx, const std::uint32_t* src,
                      std::int64_t stride) {
  const __m512i low = _mm512_set1_epi32(0xF), two = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(32);
  const __m512i shift0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512i shift1 = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6);
  for (int u = 0; u < 16; ++u) {
    __m512 sc[2 * N];
#pragma GCC unroll 4
    for (int v = 0; v < 2 * N; ++v) {
      const std::uint32_t* b = src + (v / 2) * stride;
      const int h = 16 * (v % 2);
      sc[v] = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(b) + h),
                            floats_i8(reinterpret_cast<const std::int8_t*>(b + 32) + u * 32 + h));
    }
    for (int s = u * 16; s < u * 16 + 16; ++s) {
      __m512 w[2 * N];
#pragma GCC unroll 2
      for (int n = 0; n < N; ++n) {
        const std::uint32_t* b = src + n * stride;
        const __m512i raw = widen_u8(reinterpret_cast<const std::uint8_t*>(b + 160) + s * 16);
        const __m128i h8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(reinterpret_cast<const std::uint8_t*>(b + 1184) + s * 8));
        const __m512i h = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(h8, h8));  // bytes 0-7 twice
        const __m512i q0 = _mm512_or_si512(_mm512_and_si512(raw, low),
                                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(h, shift0), two), 4));
        const __m512i q1 = _mm512_or_si512(_mm512_srli_epi32(raw, 4),
                                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(h, shift1), two), 4));
        w[2 * n] = _mm512_mul_ps(sc[2 * n], _mm512_cvtepi32_ps(_mm512_sub_epi32(q0, bias)));
        w[2 * n + 1] = _mm512_mul_ps(sc[2 * n + 1], _mm512_cvtepi32_ps(_mm512_sub_epi32(q1, bias)));
      }
      step_v<M, 2 * N>(acc, x, ldx, s, w);
    }
  }
}

template <int M, int N>
void panel_quant_m(DType d, const float* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t stride,
                   std::int64_t k, const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  __m512 acc[M][2 * N];
  if constexpr (N == 1) {
    start<M>(acc, a, lda, cols);
  } else {
    wide_start_n<M, 2 * N>(acc, a, lda);
  }
  switch (d) {  // every DType (-Wswitch); kernels/quant_unpack.hpp's refusal for the rest
    case DType::q8_0:
      for (std::int64_t b = 0; b < k / 32; ++b) fold_q8_0<M, N>(acc, x + b * 32, ldx, w + b * 288, stride);
      break;
    case DType::q4_k:
      for (std::int64_t b = 0; b < k / 256; ++b) fold_q4_k<M, N>(acc, x + b * 256, ldx, w + b * 1216, stride);
      break;
    case DType::q6_k:
      for (std::int64_t b = 0; b < k / 256; ++b) fold_q6_k<M, N>(acc, x + b * 256, ldx, w + b * 1696, stride);
      break;
    case DType::f32:
    case DType::bf16:
    case DType::f16: refuse_panel_type(d);  // (Linear refuses a value past the enum at its boundary)
  }
  if constexpr (N == 1)
    finish<M>(acc, y, ldy, cols, add);
  else
    wide_finish_n<M, 2 * N>(acc, y, ldy, add);
}

// m in 1..n (n <= 12) -> f(std::integral_constant<int, m>), n for anything larger.
template <int N, class F>
void by_rows(int m, F f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((m == I + 1 || (I + 1 == N && m > N) ? (f(std::integral_constant<int, I + 1>{}), true) : false) || ...);
  }(std::make_integer_sequence<int, N>{});
}

void panel_f32(const float* x, std::int64_t ldx, int m, const float* w, std::int64_t k, const float* a,
               std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  by_rows<kRows>(m, [&](auto M) { panel_f32_m<M>(x, ldx, w, k, a, lda, y, ldy, cols, add); });
}
void panel_bf16(const std::uint32_t* x, std::int64_t ldx, int m, const std::uint32_t* w, std::int64_t k,
                const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  by_rows<kRowsBf16>(m, [&](auto M) { panel_bf16_m<M>(x, ldx, w, k, a, lda, y, ldy, cols, add); });
}
void wide_f32(const float* x, std::int64_t ldx, int m, const float* w, std::int64_t stride, std::int64_t k,
              const float* a, std::int64_t lda, float* y, std::int64_t ldy, bool add) {
  by_rows<kWideRows>(m, [&](auto M) { wide_f32_m<M>(x, ldx, w, stride, k, a, lda, y, ldy, add); });
}
void panel_f16(const float* x, std::int64_t ldx, int m, const std::uint16_t* w, std::int64_t k, const float* a,
               std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  by_rows<kRows>(m, [&](auto M) { panel_f32_m<M>(x, ldx, w, k, a, lda, y, ldy, cols, add); });
}
void wide_f16(const float* x, std::int64_t ldx, int m, const std::uint16_t* w, std::int64_t stride, std::int64_t k,
              const float* a, std::int64_t lda, float* y, std::int64_t ldy, bool add) {
  by_rows<kWideRows>(m, [&](auto M) { wide_f32_m<M>(x, ldx, w, stride, k, a, lda, y, ldy, add); });
}
void wide_bf16(const std::uint32_t* x, std::int64_t ldx, int m, const std::uint32_t* w, std::int64_t stride,
               std::int64_t k, const float* a, std::int64_t lda, float* y, std::int64_t ldy, bool add) {
  by_rows<kWideRows>(m, [&](auto M) { wide_bf16_m<M>(x, ldx, w, stride, k, a, lda, y, ldy, add); });
}
__attribute__((target("avx512bf16"))) void panel_dot(const std::uint32_t* x, std::int64_t ldx, int m,
                                                     const std::uint32_t* w, std::int64_t k, const float* a,
                                                     std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  by_rows<kRows>(m, [&](auto M) { panel_dot_m<M>(x, ldx, w, k, a, lda, y, ldy, cols, add); });
}
__attribute__((target("avx512bf16"))) void wide_dot(const std::uint32_t* x, std::int64_t ldx, int m,
                                                    const std::uint32_t* w, std::int64_t stride, std::int64_t k,
                                                    const float* a, std::int64_t lda, float* y, std::int64_t ldy,
                                                    bool add) {
  by_rows<kWideRows>(m, [&](auto M) { wide_dot_m<M>(x, ldx, w, stride, k, a, lda, y, ldy, add); });
}

void panel_quant(DType d, const float* x, std::int64_t ldx, int m, const std::uint32_t* w, std::int64_t stride,
                 int panels, std::int64_t k, const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols,
                 bool add) {
  if (panels == 2)
    by_rows<kQuantWideRows>(m, [&](auto M) { panel_quant_m<M, 2>(d, x, ldx, w, stride, k, a, lda, y, ldy, cols, add); });
  else
    by_rows<kQuantRows>(m, [&](auto M) { panel_quant_m<M, 1>(d, x, ldx, w, stride, k, a, lda, y, ldy, cols, add); });
}

}  // namespace

const LinearOps kLinearAvx512 = {
    .name = "avx512", .max_rows_f32 = kRows, .max_rows_bf16 = kRowsBf16,
    .panel_f32 = panel_f32, .panel_bf16 = panel_bf16, .panel_f16 = panel_f16,
    .wide_rows = kWideRows, .wide_panels = kWide, .wide_f32 = wide_f32, .wide_bf16 = wide_bf16, .wide_f16 = wide_f16,
    .unpack = unpack_panel_block, .quant_rows = kQuantRows, .quant_wide_rows = kQuantWideRows, .panel_quant = panel_quant};
const LinearOps kLinearAvx512Bf16 = {
    .name = "avx512-bf16", .max_rows_f32 = kRows, .max_rows_bf16 = kRows,
    .panel_f32 = panel_f32, .panel_bf16 = panel_dot, .panel_f16 = panel_f16,
    .wide_rows = kWideRows, .wide_panels = kWide, .wide_f32 = wide_f32, .wide_bf16 = wide_dot, .wide_f16 = wide_f16,
    .unpack = unpack_panel_block, .quant_rows = kQuantRows, .quant_wide_rows = kQuantWideRows, .panel_quant = panel_quant};

}  // namespace ringattn::kernels
