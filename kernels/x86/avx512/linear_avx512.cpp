// The AVX-512 path of the weight matmul's panel loop (kernels/linear_ops.hpp): a register
// tile of up to 12 rows x 32 columns (24 accumulators), per k two weight vectors and one
// broadcast of x per row. bf16 weights widen in registers (a shift for the even k, an AND
// for the odd one); they are never stored as fp32.
#include <immintrin.h>

#include <cstdint>

#include "kernels/linear_ops.hpp"

namespace ringattn::kernels {
namespace {

constexpr int kRows = 12;

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

template <int M>
void panel_f32_m(const float* x, std::int64_t ldx, const float* w, std::int64_t k, const float* a, std::int64_t lda,
                 float* y, std::int64_t ldy, int cols, bool add) {
  __m512 acc[M][2];
  start<M>(acc, a, lda, cols);
  for (std::int64_t s = 0; s < k; ++s) {
    const float* ws = w + s * kPanel;
    step<M>(acc, x, ldx, s, _mm512_loadu_ps(ws), _mm512_loadu_ps(ws + 16));
  }
  finish<M>(acc, y, ldy, cols, add);
}

template <int M>
void panel_bf16_m(const float* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t k, const float* a,
                  std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  __m512 acc[M][2];
  start<M>(acc, a, lda, cols);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  std::int64_t s = 0;
  for (; s + 2 <= k; s += 2) {
    const std::uint32_t* ws = w + (s / 2) * kPanel;
    const __m512i v0 = _mm512_loadu_si512(ws), v1 = _mm512_loadu_si512(ws + 16);
    step<M>(acc, x, ldx, s, _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)),
            _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16)));
    step<M>(acc, x, ldx, s + 1, _mm512_castsi512_ps(_mm512_and_si512(v0, high)),
            _mm512_castsi512_ps(_mm512_and_si512(v1, high)));
  }
  if (s < k) {  // odd K: the last word's low half only (x has no element k)
    const std::uint32_t* ws = w + (s / 2) * kPanel;
    step<M>(acc, x, ldx, s, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(ws), 16)),
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(ws + 16), 16)));
  }
  finish<M>(acc, y, ldy, cols, add);
}

// Few rows over kWide full panels at once: M rows x 8 vectors of accumulators.
constexpr int kWide = 4, kWideRows = 3;

template <int M, bool Bf16>
void wide_m(const float* x, std::int64_t ldx, const void* w, std::int64_t stride, std::int64_t k, const float* a,
            std::int64_t lda, float* y, std::int64_t ldy, bool add) {
  __m512 acc[M][2 * kWide];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * kWide; ++v) acc[i][v] = a ? _mm512_loadu_ps(a + i * lda + 16 * v) : _mm512_setzero_ps();
  auto step = [&](std::int64_t s, const __m512 (&wv)[2 * kWide]) {
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i * ldx + s]);
#pragma GCC unroll 8
      for (int v = 0; v < 2 * kWide; ++v) acc[i][v] = _mm512_fmadd_ps(xi, wv[v], acc[i][v]);
    }
  };
  if constexpr (!Bf16) {
    const float* wf = static_cast<const float*>(w);
    for (std::int64_t s = 0; s < k; ++s) {
      __m512 wv[2 * kWide];
#pragma GCC unroll 8
      for (int v = 0; v < 2 * kWide; ++v) wv[v] = _mm512_loadu_ps(wf + (v / 2) * stride + s * kPanel + 16 * (v % 2));
      step(s, wv);
    }
  } else {
    const std::uint32_t* wb = static_cast<const std::uint32_t*>(w);
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (std::int64_t s = 0; s < k; s += 2) {
      __m512i raw[2 * kWide];
#pragma GCC unroll 8
      for (int v = 0; v < 2 * kWide; ++v)
        raw[v] = _mm512_loadu_si512(wb + (v / 2) * stride + (s / 2) * kPanel + 16 * (v % 2));
      __m512 wv[2 * kWide];
#pragma GCC unroll 8
      for (int v = 0; v < 2 * kWide; ++v) wv[v] = _mm512_castsi512_ps(_mm512_slli_epi32(raw[v], 16));
      step(s, wv);
      if (s + 1 < k) {  // odd K: the last word's low half only
#pragma GCC unroll 8
        for (int v = 0; v < 2 * kWide; ++v) wv[v] = _mm512_castsi512_ps(_mm512_and_si512(raw[v], high));
        step(s + 1, wv);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * kWide; ++v) {
      float* yv = y + i * ldy + 16 * v;
      _mm512_storeu_ps(yv, add ? _mm512_add_ps(_mm512_loadu_ps(yv), acc[i][v]) : acc[i][v]);
    }
}

template <bool Bf16>
void wide(const float* x, std::int64_t ldx, int m, const void* w, std::int64_t stride, std::int64_t k, const float* a,
          std::int64_t lda, float* y, std::int64_t ldy, bool add) {
  switch (m) {
    case 1: return wide_m<1, Bf16>(x, ldx, w, stride, k, a, lda, y, ldy, add);
    case 2: return wide_m<2, Bf16>(x, ldx, w, stride, k, a, lda, y, ldy, add);
    default: return wide_m<3, Bf16>(x, ldx, w, stride, k, a, lda, y, ldy, add);
  }
}

// m in 1..kRows -> the instantiation for that many rows.
template <template <int> class F, typename... A>
void by_rows(int m, A... a) {
  switch (m) {
    case 1: return F<1>::run(a...);
    case 2: return F<2>::run(a...);
    case 3: return F<3>::run(a...);
    case 4: return F<4>::run(a...);
    case 5: return F<5>::run(a...);
    case 6: return F<6>::run(a...);
    case 7: return F<7>::run(a...);
    case 8: return F<8>::run(a...);
    case 9: return F<9>::run(a...);
    case 10: return F<10>::run(a...);
    case 11: return F<11>::run(a...);
    default: return F<12>::run(a...);
  }
}
template <int M>
struct F32 {
  static void run(const float* x, std::int64_t ldx, const float* w, std::int64_t k, const float* a, std::int64_t lda,
                  float* y, std::int64_t ldy, int cols, bool add) {
    panel_f32_m<M>(x, ldx, w, k, a, lda, y, ldy, cols, add);
  }
};
template <int M>
struct Bf16 {
  static void run(const float* x, std::int64_t ldx, const std::uint32_t* w, std::int64_t k, const float* a,
                  std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
    panel_bf16_m<M>(x, ldx, w, k, a, lda, y, ldy, cols, add);
  }
};

void panel_f32(const float* x, std::int64_t ldx, int m, const float* w, std::int64_t k, const float* a,
               std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  by_rows<F32>(m, x, ldx, w, k, a, lda, y, ldy, cols, add);
}
void panel_bf16(const float* x, std::int64_t ldx, int m, const std::uint32_t* w, std::int64_t k, const float* a,
                std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  by_rows<Bf16>(m, x, ldx, w, k, a, lda, y, ldy, cols, add);
}

}  // namespace

const LinearOps kLinearAvx512 = {"avx512", kRows, kRows, panel_f32, panel_bf16, kWideRows, kWide, wide<false>, wide<true>};

}  // namespace ringattn::kernels
