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

}  // namespace

const LinearOps kLinearAvx2 = {.name = "avx2", .max_rows_f32 = kRowsF32, .max_rows_bf16 = kRowsBf16,
                               .panel_f32 = panel_fp32_x<float>, .panel_bf16 = panel_bf16,
                               .panel_f16 = panel_fp32_x<std::uint16_t>, .unpack = unpack_panel_block};

}  // namespace ringattn::kernels
