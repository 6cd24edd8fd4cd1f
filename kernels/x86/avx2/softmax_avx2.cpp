// AVX2 + FMA softmax pieces: 8 lanes, masked loads built from lane indices for the
// ragged edges of a row, exp via a degree-7 polynomial for 2^f and an exponent-field
// build for 2^n.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cache_loops.hpp"
#include "kernels/softmax_ops.hpp"

namespace ringattn::kernels {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

inline __m256 exp2_ps(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
  x = _mm256_min_ps(x, _mm256_set1_ps(127.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.525273380405984e-05f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381606e-04f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618129107628477e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550410866482158e-02f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402265069591007e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931471805599453e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// 8 floats -> 8 bf16 (round to nearest even) in the low 128 bits.
inline __m128i to_bf16_ps(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i packed = _mm256_packus_epi32(r, r);  // per 128-bit lane: a0..a3 a0..a3 | b0..b3 b0..b3
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

inline __m256 from_bf16_ps(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256i lane_mask(int j, int lo, int hi) {
  const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i ge_lo = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(lo - 1));
  const __m256i lt_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), idx);
  return _mm256_and_si256(ge_lo, lt_hi);
}

inline float hmax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

inline void store_bf16(std::uint16_t* dst, __m128i h, int count) {
  if (count >= 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), h);
  } else {
    alignas(16) std::uint16_t tmp[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), h);
    std::memcpy(dst, tmp, static_cast<std::size_t>(count) * 2);
  }
}

float online_row_avx2(const float* s, int n, int lo, int hi, float scale, float* m, float* l,
                      float* p_f32, std::uint16_t* p_bf16) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const __m256 vninf = _mm256_set1_ps(ninf);
  __m256 vmax = vninf;
  for (int j = lo - (lo % 8); j < hi; j += 8) {
    const __m256i k = lane_mask(j, lo, hi);
    const __m256 x = _mm256_blendv_ps(vninf, _mm256_maskload_ps(s + j, k), _mm256_castsi256_ps(k));
    vmax = _mm256_max_ps(vmax, x);
  }
  const float mx = hmax(vmax);
  const float m_old = *m;
  const float m_new = std::fmax(m_old, mx * scale);
  const __m256 zero = _mm256_setzero_ps();
  if (m_new == ninf) {
    for (int j = 0; j < n; ++j) {
      if (p_f32) p_f32[j] = 0.0f;
      else p_bf16[j] = 0;
    }
    return 1.0f;
  }
  const float alpha = m_old == ninf ? 0.0f : std::exp(m_old - m_new);
  const __m256 c = _mm256_set1_ps(scale * kLog2e);
  const __m256 m2 = _mm256_set1_ps(m_new * kLog2e);
  __m256 vsum = zero;
  for (int j = 0; j < n; j += 8) {
    const __m256i vis = lane_mask(j, lo, hi);
    __m256 p = zero;
    if (!_mm256_testz_si256(vis, vis)) {
      const __m256 x = _mm256_maskload_ps(s + j, vis);
      p = _mm256_and_ps(exp2_ps(_mm256_fmsub_ps(x, c, m2)), _mm256_castsi256_ps(vis));
    }
    const int count = n - j < 8 ? n - j : 8;
    vsum = _mm256_add_ps(vsum, p);  // fp32 sum, see the generic path
    if (p_f32) _mm256_maskstore_ps(p_f32 + j, lane_mask(j, 0, n), p);
    else store_bf16(p_bf16 + j, to_bf16_ps(p), count);
  }
  *l = *l * alpha + hsum(vsum);
  *m = m_new;
  return alpha;
}

void rescale_add_avx2(float* o, const float* t, float alpha, int n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(o + i, _mm256_fmadd_ps(_mm256_loadu_ps(o + i), a, _mm256_loadu_ps(t + i)));
  for (; i < n; ++i) o[i] = o[i] * alpha + t[i];
}

void to_bf16_avx2(const float* src, std::uint16_t* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) break;  // NaNs: scalar below
    store_bf16(dst + i, to_bf16_ps(x), 8);
  }
  for (; i < n; ++i) kOpsGeneric.to_bf16(src + i, dst + i, 1);
}

void from_bf16_avx2(const std::uint16_t* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, from_bf16_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  kOpsGeneric.from_bf16(src + i, dst + i, n - i);
}

void exp2_avx2(const float* x, float* y, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp2_ps(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) {
    alignas(32) float tmp[8] = {x[i]};
    _mm256_store_ps(tmp, exp2_ps(_mm256_load_ps(tmp)));
    y[i] = tmp[0];
  }
}

// The exponent-carry test of the generic path, 8 floats or 16 bf16 at a time; the
// ragged tail goes through the generic one.
bool has_non_finite_f32_avx2(const float* x, std::int64_t n) {
  const __m256i expo = _mm256_set1_epi32(0x7f800000), one = _mm256_set1_epi32(0x00800000);
  __m256i acc = _mm256_setzero_si256();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    acc = _mm256_or_si256(acc, _mm256_add_epi32(_mm256_and_si256(v, expo), one));
  }
  return !_mm256_testz_si256(acc, _mm256_set1_epi32(static_cast<int>(0x80000000u))) ||
         kOpsGeneric.has_non_finite_f32(x + i, n - i);
}

bool has_non_finite_bf16_avx2(const std::uint16_t* x, std::int64_t n) {
  const __m256i expo = _mm256_set1_epi16(0x7f80), one = _mm256_set1_epi16(0x0080);
  __m256i acc = _mm256_setzero_si256();
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    acc = _mm256_or_si256(acc, _mm256_add_epi16(_mm256_and_si256(v, expo), one));
  }
  return !_mm256_testz_si256(acc, _mm256_set1_epi16(static_cast<short>(0x8000))) ||
         kOpsGeneric.has_non_finite_bf16(x + i, n - i);
}

RINGATTN_CACHE_LOOPS(avx2)

}  // namespace

const SoftmaxOps kOpsAvx2 = {"avx2",          online_row_avx2,     rescale_add_avx2,
                             to_bf16_avx2,    from_bf16_avx2,      exp2_avx2,
                             has_non_finite_f32_avx2, has_non_finite_bf16_avx2,
    cache_scores_f32_avx2, cache_scores_bf16_avx2, cache_pv_f32_avx2, cache_pv_bf16_avx2};

}  // namespace ringattn::kernels
