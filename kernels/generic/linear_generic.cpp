// The generic path of the weight matmul's panel loop (kernels/linear_ops.hpp): plain C++,
// the oracle the SIMD paths are tested against. The compiler may vectorise across the
// 32 columns (each column its own chain), never across k.
#include <cstdint>
#include <cstring>

#include "kernels/linear_ops.hpp"

namespace ringattn::kernels {
namespace {

constexpr int kRows = 4;

inline float low_half(std::uint32_t u) {
  const std::uint32_t b = u << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline float high_half(std::uint32_t u) {
  const std::uint32_t b = u & 0xFFFF0000u;
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

template <int M>
void panel_f32_m(const float* x, std::int64_t ldx, const float* w, std::int64_t k, const float* a, std::int64_t lda,
                 float* y, std::int64_t ldy, int cols, bool add) {
  float acc[M][kPanel];
  start<M>(acc, a, lda, cols);
  for (std::int64_t s = 0; s < k; ++s) {
    const float* ws = w + s * kPanel;
    for (int i = 0; i < M; ++i) {
      const float a = x[i * ldx + s];
      for (int j = 0; j < kPanel; ++j) acc[i][j] += a * ws[j];
    }
  }
  finish<M>(acc, y, ldy, cols, add);
}

template <int M>
void panel_bf16_m(const float* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t k, const float* a,
                  std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  float acc[M][kPanel];
  start<M>(acc, a, lda, cols);
  for (std::int64_t s = 0; s < k; ++s) {
    const std::uint32_t* ws = w + (s / 2) * kPanel;
    const bool high = s % 2 != 0;
    for (int i = 0; i < M; ++i) {
      const float a = x[i * ldx + s];
      for (int j = 0; j < kPanel; ++j) acc[i][j] += a * (high ? high_half(ws[j]) : low_half(ws[j]));
    }
  }
  finish<M>(acc, y, ldy, cols, add);
}

void panel_f32(const float* x, std::int64_t ldx, int m, const float* w, std::int64_t k, const float* a,
               std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  switch (m) {
    case 1: return panel_f32_m<1>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 2: return panel_f32_m<2>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 3: return panel_f32_m<3>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    default: return panel_f32_m<4>(x, ldx, w, k, a, lda, y, ldy, cols, add);
  }
}

void panel_bf16(const float* x, std::int64_t ldx, int m, const std::uint32_t* w, std::int64_t k, const float* a,
                std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  switch (m) {
    case 1: return panel_bf16_m<1>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 2: return panel_bf16_m<2>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    case 3: return panel_bf16_m<3>(x, ldx, w, k, a, lda, y, ldy, cols, add);
    default: return panel_bf16_m<4>(x, ldx, w, k, a, lda, y, ldy, cols, add);
  }
}

}  // namespace

const LinearOps kLinearGeneric = {"generic", kRows, kRows, panel_f32, panel_bf16};

}  // namespace ringattn::kernels
