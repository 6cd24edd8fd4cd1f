// The AVX2 path of the weight matmul's panel loop (kernels/linear_ops.hpp). Sixteen ymm
// registers hold a tile of up to 6 rows x 16 columns (12 accumulators), so a 32-column
// panel runs as two halves, each over the whole of K; bf16 weights and x pairs widen in
// registers (shift or AND) with 4 rows a tile, the widened vectors needing registers of
// their own. f16 weights widen by F16C (every AVX2 CPU has it) into the f32 loops.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/linear_ops.hpp"
#include "kernels/quant_unpack.hpp"

namespace ringattn::kernels {
namespace {

constexpr int kRowsF32 = 6;
constexpr int kRowsBf16 = 4;

// The carried sums of columns [0, cols) of a half (cols <= 16), zero beyond.
template <int M>
inline void start(__m256 (&acc)[M][2], const float* a, std::int64_t lda, int cols) {
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    if (!a) {
      acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    } else if (cols == 16) {
      acc[i][0] = _mm256_loadu_ps(a + i * lda);
      acc[i][1] = _mm256_loadu_ps(a + i * lda + 8);
    } else {
      alignas(32) float t[16] = {};
      for (int j = 0; j < cols; ++j) t[j] = a[i * lda + j];
      acc[i][0] = _mm256_load_ps(t);
      acc[i][1] = _mm256_load_ps(t + 8);
    }
  }
}

template <int M>
inline void finish(__m256 (&acc)[M][2], float* y, std::int64_t ldy, int cols, bool add) {
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    float* yi = y + i * ldy;
    if (cols == 16) {
      __m256 a0 = acc[i][0], a1 = acc[i][1];
      if (add) {
        a0 = _mm256_add_ps(_mm256_loadu_ps(yi), a0);
        a1 = _mm256_add_ps(_mm256_loadu_ps(yi + 8), a1);
      }
      _mm256_storeu_ps(yi, a0);
      _mm256_storeu_ps(yi + 8, a1);
    } else {
      alignas(32) float t[16];
      _mm256_store_ps(t, acc[i][0]);
      _mm256_store_ps(t + 8, acc[i][1]);
      for (int j = 0; j < cols; ++j) yi[j] = add ? yi[j] + t[j] : t[j];
    }
  }
}

template <int M>
inline void step(__m256 (&acc)[M][2], const float* x, std::int64_t ldx, std::int64_t s, __m256 w0, __m256 w1) {
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    const __m256 a = _mm256_broadcast_ss(x + i * ldx + s);
    acc[i][0] = _mm256_fmadd_ps(a, w0, acc[i][0]);
    acc[i][1] = _mm256_fmadd_ps(a, w1, acc[i][1]);
  }
}

// 8 weights as floats: f32 loaded, f16 widened (F16C, exact).
inline __m256 load8(const float* w) { return _mm256_loadu_ps(w); }
inline __m256 load8(const std::uint16_t* w) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
}

// Columns [0, 16) of a panel whose k-rows are kPanel wide (w points at the half).
template <int M, class W>
void half_f32(const float* x, std::int64_t ldx, const W* w, std::int64_t k, const float* a, std::int64_t lda,
              float* y, std::int64_t ldy, int cols, bool add) {
  __m256 acc[M][2];
  start<M>(acc, a, lda, cols);
  for (std::int64_t s = 0; s < k; ++s) {
    const W* ws = w + s * kPanel;
    step<M>(acc, x, ldx, s, load8(ws), load8(ws + 8));
  }
  finish<M>(acc, y, ldy, cols, add);
}

// bf16 pairs of x and of the weights: the odd step first, as the dot instruction folds them.
template <int M>
void half_bf16(const std::uint32_t* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t k, const float* a,
               std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  __m256 acc[M][2];
  start<M>(acc, a, lda, cols);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (std::int64_t p = 0; p < (k + 1) / 2; ++p) {
    const std::uint32_t* ws = w + p * kPanel;
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws + 8));
    const __m256 o0 = _mm256_castsi256_ps(_mm256_and_si256(v0, high)), o1 = _mm256_castsi256_ps(_mm256_and_si256(v1, high));
    const __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), e1 = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m256i xp = _mm256_set1_epi32(static_cast<int>(x[i * ldx + p]));
      const __m256 xo = _mm256_castsi256_ps(_mm256_and_si256(xp, high)), xe = _mm256_castsi256_ps(_mm256_slli_epi32(xp, 16));
      acc[i][0] = _mm256_fmadd_ps(xo, o0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xo, o1, acc[i][1]);
      acc[i][0] = _mm256_fmadd_ps(xe, e0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xe, e1, acc[i][1]);
    }
  }
  finish<M>(acc, y, ldy, cols, add);
}

template <int M, class X, class W>
void panel_m(const X* x, std::int64_t ldx, const W* w, std::int64_t k, const float* a, std::int64_t lda, float* y,
             std::int64_t ldy, int cols, bool add) {
  for (int h = 0; h < 2; ++h) {
    const int n = cols - 16 * h < 16 ? cols - 16 * h : 16;
    if (n <= 0) break;
    if constexpr (std::is_same_v<W, std::uint32_t>)
      half_bf16<M>(x, ldx, w + 16 * h, k, a ? a + 16 * h : nullptr, lda, y + 16 * h, ldy, n, add);
    else
      half_f32<M>(x, ldx, w + 16 * h, k, a ? a + 16 * h : nullptr, lda, y + 16 * h, ldy, n, add);
  }
}

// fp32 rows of x against f32 or f16 weights: m in 1..6 rows a tile.
template <class W>
void panel_fp32_x(const float* x, std::int64_t ldx, int m, const W* w, std::int64_t k, const float* a,
                  std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  switch (m) {
    case 1: return panel_m<1>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 2: return panel_m<2>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 3: return panel_m<3>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 4: return panel_m<4>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 5: return panel_m<5>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    default: return panel_m<6>(x, ldx, w, k, a, lda, y, ldy, cols, add);
  }
}

void panel_bf16(const std::uint32_t* x, std::int64_t ldx, int m, const std::uint32_t* w, std::int64_t k, const float* a,
                std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  switch (m) {
    case 1: return panel_m<1>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 2: return panel_m<2>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 3: return panel_m<3>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    default: return panel_m<4>(x, ldx, w, k, a, lda, y, ldy, cols, add);
  }
}

// Block formats, few rows: half H of a panel (columns 16H..16H+15) with each step's two
// weight vectors unpacked in registers as kernels/quant_unpack.hpp computes them (a product,
// and for q4_k a subtraction, rounded one at a time), then half_f32's step: the bits of
// unpack + panel_fp32_x.
constexpr int kQuantRows = 4;

inline __m256i widen_u8(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 floats_u8(const std::uint8_t* p) { return _mm256_cvtepi32_ps(widen_u8(p)); }
inline __m256 floats_i8(const std::int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// q8_0: d[32] | int8 q [32 steps][32].
template <int M, int H>
inline void fold_q8_0(__m256 (&acc)[M][2], const float* x, std::int64_t ldx, const std::uint32_t* src) {
  const auto* f = reinterpret_cast<const float*>(src) + 16 * H;
  const __m256 d0 = _mm256_loadu_ps(f), d1 = _mm256_loadu_ps(f + 8);
  const auto* q = reinterpret_cast<const std::int8_t*>(src + 32) + 16 * H;
  for (int s = 0; s < 32; ++s)
    step<M>(acc, x, ldx, s, _mm256_mul_ps(d0, floats_i8(q + s * 32)), _mm256_mul_ps(d1, floats_i8(q + s * 32 + 8)));
}

// A step's 16 nibbles of half H: byte c's low nibble is column c, its high one column c + 16.
template <int H>
inline __m256i nibbles(__m256i raw) {
  return H == 0 ? _mm256_and_si256(raw, _mm256_set1_epi32(0xF)) : _mm256_srli_epi32(raw, 4);
}

// q4_k: d[32], dmin[32] | scale u8 [8][32] | min u8 [8][32] | nibbles [256][16].
template <int M, int H>
inline void fold_q4_k(__m256 (&acc)[M][2], const float* x, std::int64_t ldx, const std::uint32_t* src) {
  const auto* f = reinterpret_cast<const float*>(src) + 16 * H;
  const __m256 d0 = _mm256_loadu_ps(f), d1 = _mm256_loadu_ps(f + 8);
  const __m256 n0 = _mm256_loadu_ps(f + 32), n1 = _mm256_loadu_ps(f + 40);
  const auto* scale = reinterpret_cast<const std::uint8_t*>(src + 64) + 16 * H;
  const auto* min = reinterpret_cast<const std::uint8_t*>(src + 128) + 16 * H;
  const auto* nib = reinterpret_cast<const std::uint8_t*>(src + 192);
  for (int t = 0; t < 8; ++t) {
    const __m256 s0 = _mm256_mul_ps(d0, floats_u8(scale + t * 32)), s1 = _mm256_mul_ps(d1, floats_u8(scale + t * 32 + 8));
    const __m256 m0 = _mm256_mul_ps(n0, floats_u8(min + t * 32)), m1 = _mm256_mul_ps(n1, floats_u8(min + t * 32 + 8));
    for (int s = t * 32; s < t * 32 + 32; ++s) {
      const __m256 q0 = _mm256_cvtepi32_ps(nibbles<H>(widen_u8(nib + s * 16)));
      const __m256 q1 = _mm256_cvtepi32_ps(nibbles<H>(widen_u8(nib + s * 16 + 8)));
      step<M>(acc, x, ldx, s, _mm256_sub_ps(_mm256_mul_ps(s0, q0), m0), _mm256_sub_ps(_mm256_mul_ps(s1, q1), m1));
    }
  }
}

// q6_k: d[32] | scale int8 [16][32] | low nibbles [256][16] | high 2 bits [256][8] (byte c:
// columns c, c + 8, c + 16, c + 24 from bit 0).
template <int M, int H>
inline void fold_q6_k(__m256 (&acc)[M][2], const float* x, std::int64_t ldx, const std::uint32_t* src) {
  const auto* f = reinterpret_cast<const float*>(src) + 16 * H;
  const __m256 d0 = _mm256_loadu_ps(f), d1 = _mm256_loadu_ps(f + 8);
  const auto* scale = reinterpret_cast<const std::int8_t*>(src + 32) + 16 * H;
  const auto* nib = reinterpret_cast<const std::uint8_t*>(src + 160);
  const auto* high = reinterpret_cast<const std::uint8_t*>(src + 1184);
  const __m256i two = _mm256_set1_epi32(3), bias = _mm256_set1_epi32(32);
  for (int u = 0; u < 16; ++u) {
    const __m256 s0 = _mm256_mul_ps(d0, floats_i8(scale + u * 32)), s1 = _mm256_mul_ps(d1, floats_i8(scale + u * 32 + 8));
    for (int s = u * 16; s < u * 16 + 16; ++s) {
      const __m256i h = widen_u8(high + s * 8);
      const __m256i q0 = _mm256_or_si256(nibbles<H>(widen_u8(nib + s * 16)),
                                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4 * H), two), 4));
      const __m256i q1 = _mm256_or_si256(nibbles<H>(widen_u8(nib + s * 16 + 8)),
                                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4 * H + 2), two), 4));
      step<M>(acc, x, ldx, s, _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_sub_epi32(q0, bias))),
              _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_sub_epi32(q1, bias))));
    }
  }
}

template <int M, int H>
void half_quant(DType d, const float* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t k, const float* a,
                std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  __m256 acc[M][2];
  start<M>(acc, a, lda, cols);
  switch (d) {  // every DType (-Wswitch); kernels/quant_unpack.hpp's refusal for the rest
    case DType::q8_0:
      for (std::int64_t b = 0; b < k / 32; ++b) fold_q8_0<M, H>(acc, x + b * 32, ldx, w + b * 288);
      break;
    case DType::q4_k:
      for (std::int64_t b = 0; b < k / 256; ++b) fold_q4_k<M, H>(acc, x + b * 256, ldx, w + b * 1216);
      break;
    case DType::q6_k:
      for (std::int64_t b = 0; b < k / 256; ++b) fold_q6_k<M, H>(acc, x + b * 256, ldx, w + b * 1696);
      break;
    case DType::f32:
    case DType::bf16:
    case DType::f16: refuse_panel_type(d);  // (Linear refuses a value past the enum at its boundary)
  }
  finish<M>(acc, y, ldy, cols, add);
}

template <int M>
void quant_m(DType d, const float* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t k, const float* a,
             std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  half_quant<M, 0>(d, x, ldx, w, k, a, lda, y, ldy, cols < 16 ? cols : 16, add);
  if (cols > 16) half_quant<M, 1>(d, x, ldx, w, k, a ? a + 16 : nullptr, lda, y + 16, ldy, cols - 16, add);
}

// One panel a call (quant_wide_rows = 0): the halves already keep one row's chains apart.
void panel_quant(DType d, const float* x, std::int64_t ldx, int m, const std::uint32_t* w, std::int64_t /*stride*/,
                 int /*panels*/, std::int64_t k, const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols,
                 bool add) {
  switch (m) {
    case 1: return quant_m<1>(d, x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 2: return quant_m<2>(d, x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 3: return quant_m<3>(d, x, ldx, w, k, a, lda, y, ldy, cols, add);
    default: return quant_m<4>(d, x, ldx, w, k, a, lda, y, ldy, cols, add);
  }
}

}  // namespace

const LinearOps kLinearAvx2 = {.name = "avx2", .max_rows_f32 = kRowsF32, .max_rows_bf16 = kRowsBf16,
                               .panel_f32 = panel_fp32_x<float>, .panel_bf16 = panel_bf16,
                               .panel_f16 = panel_fp32_x<std::uint16_t>, .unpack = unpack_panel_block,
                               .quant_rows = kQuantRows, .panel_quant = panel_quant};

}  // namespace ringattn::kernels
