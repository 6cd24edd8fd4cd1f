// AVX-512 softmax pieces: 16 lanes, masked loads for the ragged edges of a row,
// exp via a degree-6 polynomial (relative error < 2e-7) for 2^f on [-0.5, 0.5] and vscalefps for 2^n.
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "kernels/x86/avx512/cache_avx512.hpp"
#include "kernels/softmax_ops.hpp"

namespace ringattn::kernels {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// 2^x for x <= ~128; inputs below -127 flush towards 0 (results < 1e-38).
inline __m512 exp2_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-127.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(128.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-04f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618129107628477e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550410866482158e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402265069591007e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471805599453e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Round to nearest even; callers pass finite values except in to_bf16 (NaN handled there).
inline __m256i to_bf16_ps(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

inline __m512 from_bf16_ps(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline __mmask16 lanes(int j, int lo, int hi) {
  // Lanes j..j+15 that fall in [lo, hi).
  const int a = lo > j ? lo - j : 0;
  const int b = hi - j < 16 ? (hi - j > 0 ? hi - j : 0) : 16;
  if (b <= a) return 0;
  const unsigned all = (b >= 16 ? 0xffffu : ((1u << b) - 1u));
  return static_cast<__mmask16>(all & ~((1u << a) - 1u));
}

inline __mmask16 first_n(int n) { return static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u); }

// Writes n zeros (fp32 or bf16) at p + j.
inline void zero_fill(float* p_f32, std::uint16_t* p_bf16, int j, int n) {
  for (; n > 0; j += 16, n -= 16) {
    const __mmask16 k = first_n(n);
    if (p_f32) _mm512_mask_storeu_ps(p_f32 + j, k, _mm512_setzero_ps());
    else _mm256_mask_storeu_epi16(p_bf16 + j, k, _mm256_setzero_si256());
  }
}

float online_row_avx512(const float* s, int n, int lo, int hi, float scale, float* m, float* l,
                        float* p_f32, std::uint16_t* p_bf16) {
  const float ninf = -std::numeric_limits<float>::infinity();
  // Max over the visible columns: full vectors, then one masked tail.
  __m512 vmax = _mm512_set1_ps(ninf);
  int j = lo;
  for (; j + 16 <= hi; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  if (j < hi) vmax = _mm512_mask_max_ps(vmax, first_n(hi - j), vmax, _mm512_maskz_loadu_ps(first_n(hi - j), s + j));
  const float mx = _mm512_reduce_max_ps(vmax);
  const float m_old = *m;
  const float m_new = std::fmax(m_old, mx * scale);
  if (m_new == ninf) {
    zero_fill(p_f32, p_bf16, 0, n);
    return 1.0f;
  }
  const float alpha = m_old == ninf ? 0.0f : std::exp(m_old - m_new);
  const __m512 c = _mm512_set1_ps(scale * kLog2e);
  const __m512 m2 = _mm512_set1_ps(m_new * kLog2e);
  __m512 vsum = _mm512_setzero_ps();
  zero_fill(p_f32, p_bf16, 0, lo);
  // p may alias s: each vector is loaded before the same lanes are stored.
  for (j = lo; j + 16 <= hi; j += 16) {
    const __m512 p = exp2_ps(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), c, m2));
    vsum = _mm512_add_ps(vsum, p);  // fp32 sum, see the generic path
    if (p_f32) _mm512_storeu_ps(p_f32 + j, p);
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p_bf16 + j), to_bf16_ps(p));
  }
  if (j < hi) {
    const __mmask16 k = first_n(hi - j);
    const __m512 p = _mm512_maskz_mov_ps(k, exp2_ps(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, s + j), c, m2)));
    vsum = _mm512_add_ps(vsum, p);
    if (p_f32) _mm512_mask_storeu_ps(p_f32 + j, k, p);
    else _mm256_mask_storeu_epi16(p_bf16 + j, k, to_bf16_ps(p));
    j = hi;
  }
  zero_fill(p_f32, p_bf16, hi, n - hi);
  *l = *l * alpha + _mm512_reduce_add_ps(vsum);
  *m = m_new;
  return alpha;
}

void rescale_add_avx512(float* o, const float* t, float alpha, int n) {
  const __m512 a = _mm512_set1_ps(alpha);
  int i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(o + i, _mm512_fmadd_ps(_mm512_loadu_ps(o + i), a, _mm512_loadu_ps(t + i)));
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(o + i, k, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, o + i), a,
                                                    _mm512_maskz_loadu_ps(k, t + i)));
  }
}

void to_bf16_avx512(const float* src, std::uint16_t* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i < n; i += 16) {
    const int left = n - i < 16 ? static_cast<int>(n - i) : 16;
    const __mmask16 k = static_cast<__mmask16>(left == 16 ? 0xffffu : (1u << left) - 1u);
    const __m512 x = _mm512_maskz_loadu_ps(k, src + i);
    __m256i h = to_bf16_ps(x);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    if (nan) {
      const __m256i q = _mm512_cvtepi32_epi16(_mm512_or_si512(
          _mm512_srli_epi32(_mm512_castps_si512(x), 16), _mm512_set1_epi32(0x40)));
      h = _mm256_mask_mov_epi16(h, nan, q);
    }
    _mm256_mask_storeu_epi16(dst + i, k, h);
  }
}

void from_bf16_avx512(const std::uint16_t* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const int left = n - i < 16 ? static_cast<int>(n - i) : 16;
    const __mmask16 k = static_cast<__mmask16>(left == 16 ? 0xffffu : (1u << left) - 1u);
    _mm512_mask_storeu_ps(dst + i, k, from_bf16_ps(_mm256_maskz_loadu_epi16(k, src + i)));
  }
}

// Full vectors, then one masked tail; the columns outside [lo, hi) are zero-filled.
void grad_row_avx512(float* s, float* dp, int n, int lo, int hi, float c, float m2, float scale, float delta,
                     std::uint16_t* p_bf16, std::uint16_t* ds_bf16) {
  const __m512 vc = _mm512_set1_ps(c), vm2 = _mm512_set1_ps(m2), vs = _mm512_set1_ps(scale),
               vd = _mm512_set1_ps(delta);
  const bool bf16 = p_bf16 != nullptr;
  auto zeros = [&](int j, int count) {
    zero_fill(bf16 ? nullptr : s, p_bf16, j, count);
    zero_fill(bf16 ? nullptr : dp, ds_bf16, j, count);
  };
  auto store = [&](int j, __mmask16 k, __m512 p, __m512 ds) {
    if (bf16) {
      _mm256_mask_storeu_epi16(p_bf16 + j, k, to_bf16_ps(p));
      _mm256_mask_storeu_epi16(ds_bf16 + j, k, to_bf16_ps(ds));
    } else {
      _mm512_mask_storeu_ps(s + j, k, p);
      _mm512_mask_storeu_ps(dp + j, k, ds);
    }
  };
  zeros(0, lo);
  int j = lo;
  for (; j + 16 <= hi; j += 16) {
    const __m512 p = exp2_ps(_mm512_fmsub_ps(_mm512_loadu_ps(s + j), vc, vm2));
    store(j, 0xffff, p, _mm512_mul_ps(_mm512_mul_ps(vs, p), _mm512_sub_ps(_mm512_loadu_ps(dp + j), vd)));
  }
  if (j < hi) {
    const __mmask16 k = first_n(hi - j);
    const __m512 p = exp2_ps(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, s + j), vc, vm2));
    store(j, k, p, _mm512_mul_ps(_mm512_mul_ps(vs, p), _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dp + j), vd)));
  }
  zeros(hi, n - hi);
}

void exp2_avx512(const float* x, float* y, int n) {
  for (int i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(i, 0, n);
    _mm512_mask_storeu_ps(y + i, k, exp2_ps(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

// The exponent-carry test of the generic path, 16 floats or 32 bf16 at a time; the
// masked tail loads zeros, which never set the top bit.
bool has_non_finite_f32_avx512(const float* x, std::int64_t n) {
  const __m512i expo = _mm512_set1_epi32(0x7f800000), one = _mm512_set1_epi32(0x00800000);
  __m512i acc = _mm512_setzero_si512();
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_or_si512(acc, _mm512_add_epi32(_mm512_and_si512(_mm512_loadu_si512(x + i), expo), one));
  if (i < n) {
    const __m512i v = _mm512_maskz_loadu_epi32(first_n(static_cast<int>(n - i)), x + i);
    acc = _mm512_or_si512(acc, _mm512_add_epi32(_mm512_and_si512(v, expo), one));
  }
  return _mm512_test_epi32_mask(acc, _mm512_set1_epi32(static_cast<int>(0x80000000u))) != 0;
}

bool has_non_finite_bf16_avx512(const std::uint16_t* x, std::int64_t n) {
  const __m512i expo = _mm512_set1_epi16(0x7f80), one = _mm512_set1_epi16(0x0080);
  __m512i acc = _mm512_setzero_si512();
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    acc = _mm512_or_si512(acc, _mm512_add_epi16(_mm512_and_si512(_mm512_loadu_si512(x + i), expo), one));
  if (i < n) {
    const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << (n - i)) - 1u), x + i);
    acc = _mm512_or_si512(acc, _mm512_add_epi16(_mm512_and_si512(v, expo), one));
  }
  return _mm512_test_epi16_mask(acc, _mm512_set1_epi16(static_cast<short>(0x8000))) != 0;
}

}  // namespace

const SoftmaxOps kOpsAvx512 = {"avx512",          online_row_avx512,     rescale_add_avx512,
                               to_bf16_avx512,    from_bf16_avx512,      exp2_avx512,
                               has_non_finite_f32_avx512, has_non_finite_bf16_avx512,
    avx512::cache_scores_f32, avx512::cache_scores_bf16, avx512::cache_pv_f32, avx512::cache_pv_bf16,
    grad_row_avx512};

}  // namespace ringattn::kernels
