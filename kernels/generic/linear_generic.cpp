// The generic path of the weight matmul's panel loop (kernels/linear_ops.hpp): plain C++,
// the oracle the SIMD paths are tested against. The compiler may vectorise across the
// 32 columns (each column its own chain), never across k.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/linear_ops.hpp"
#include "kernels/quant_unpack.hpp"
#include "ringattn/half.hpp"

namespace ringattn::kernels {
namespace {

constexpr int kRows = 4;

inline float widen(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <int M>
void start(float (&acc)[M][kPanel], const float* a, std::int64_t lda, int cols) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < kPanel; ++j) acc[i][j] = a && j < cols ? a[i * lda + j] : 0.0f;
}

template <int M>
void finish(float (&acc)[M][kPanel], float* y, std::int64_t ldy, int cols, bool add) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < cols; ++j) y[i * ldy + j] = add ? y[i * ldy + j] + acc[i][j] : acc[i][j];
}

// A step's 32 weights as floats: f32 as they are, f16 widened (exact).
inline const float* weights(const float* w, float (&)[kPanel]) { return w; }
inline const float* weights(const std::uint16_t* w, float (&out)[kPanel]) {
  for (int j = 0; j < kPanel; ++j) out[j] = from_f16(w[j]);
  return out;
}

template <int M, class W>
void panel_f32_m(const float* x, std::int64_t ldx, const W* w, std::int64_t k, const float* a, std::int64_t lda,
                 float* y, std::int64_t ldy, int cols, bool add) {
  float acc[M][kPanel], wide[kPanel];
  start<M>(acc, a, lda, cols);
  for (std::int64_t s = 0; s < k; ++s) {
    const float* ws = weights(w + s * kPanel, wide);
    for (int i = 0; i < M; ++i) {
      const float xs = x[i * ldx + s];
      for (int j = 0; j < kPanel; ++j) acc[i][j] += xs * ws[j];
    }
  }
  finish<M>(acc, y, ldy, cols, add);
}

// bf16 pairs, the high (odd) step first as the dot instruction folds them; each product
// is exact, so contraction into an FMA changes nothing.
template <int M>
void panel_bf16_m(const std::uint32_t* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t k, const float* a,
                  std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  float acc[M][kPanel];
  start<M>(acc, a, lda, cols);
  for (std::int64_t p = 0; p < (k + 1) / 2; ++p)
    for (int i = 0; i < M; ++i) {
      const std::uint32_t xp = x[i * ldx + p];
      const float odd = widen(xp & 0xFFFF0000u), even = widen(xp << 16);
      for (int j = 0; j < kPanel; ++j) {
        const std::uint32_t u = w[p * kPanel + j];
        acc[i][j] += odd * widen(u & 0xFFFF0000u);
        acc[i][j] += even * widen(u << 16);
      }
    }
  finish<M>(acc, y, ldy, cols, add);
}

// m in 1..kRows -> f(std::integral_constant<int, m>).
template <class F>
void by_rows(int m, F f) {
  switch (m) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

void panel_f32(const float* x, std::int64_t ldx, int m, const float* w, std::int64_t k, const float* a,
               std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  by_rows(m, [&](auto M) { panel_f32_m<M>(x, ldx, w, k, a, lda, y, ldy, cols, add); });
}
void panel_bf16(const std::uint32_t* x, std::int64_t ldx, int m, const std::uint32_t* w, std::int64_t k,
                const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  by_rows(m, [&](auto M) { panel_bf16_m<M>(x, ldx, w, k, a, lda, y, ldy, cols, add); });
}
void panel_f16(const float* x, std::int64_t ldx, int m, const std::uint16_t* w, std::int64_t k, const float* a,
               std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  by_rows(m, [&](auto M) { panel_f32_m<M>(x, ldx, w, k, a, lda, y, ldy, cols, add); });
}

}  // namespace

const LinearOps kLinearGeneric = {
    .name = "generic", .max_rows_f32 = kRows, .max_rows_bf16 = kRows,
    .panel_f32 = panel_f32, .panel_bf16 = panel_bf16, .panel_f16 = panel_f16, .unpack = unpack_panel_block};

}  // namespace ringattn::kernels
