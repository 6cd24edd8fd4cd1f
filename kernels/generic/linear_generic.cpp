// The generic path of the weight matmul's panel loop (kernels/linear_ops.hpp): plain C++,
// the oracle the SIMD paths are tested against. The compiler may vectorise across the
// 32 columns (each column its own chain), never across k.
#include <cstdint>
#include <cstring>

#include "kernels/linear_ops.hpp"

namespace ringattn::kernels {
namespace {

constexpr int kRows = 4;

// Column j's weight at step s: fp32 as stored; bf16 the low (even s) or high (odd s) half
// of its word, widened.
inline float weight(const float* w, std::int64_t s, int j) { return w[s * kPanel + j]; }
inline float weight(const std::uint32_t* w, std::int64_t s, int j) {
  const std::uint32_t u = w[(s / 2) * kPanel + j], b = s % 2 ? u & 0xFFFF0000u : u << 16;
  float f;
  std::memcpy(&f, &b, 4);
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

template <int M, class W>
void panel_m(const float* x, std::int64_t ldx, const W* w, std::int64_t k, const float* a, std::int64_t lda, float* y,
             std::int64_t ldy, int cols, bool add) {
  float acc[M][kPanel];
  start<M>(acc, a, lda, cols);
  for (std::int64_t s = 0; s < k; ++s)
    for (int i = 0; i < M; ++i) {
      const float xs = x[i * ldx + s];
      for (int j = 0; j < kPanel; ++j) acc[i][j] += xs * weight(w, s, j);
    }
  finish<M>(acc, y, ldy, cols, add);
}

template <class W>
void panel(const float* x, std::int64_t ldx, int m, const W* w, std::int64_t k, const float* a, std::int64_t lda,
           float* y, std::int64_t ldy, int cols, bool add) {
  switch (m) {
    case 1: return panel_m<1>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 2: return panel_m<2>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 3: return panel_m<3>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    default: return panel_m<4>(x, ldx, w, k, a, lda, y, ldy, cols, add);
  }
}

}  // namespace

const LinearOps kLinearGeneric = {"generic", kRows, kRows, panel<float>, panel<std::uint32_t>};

}  // namespace ringattn::kernels
