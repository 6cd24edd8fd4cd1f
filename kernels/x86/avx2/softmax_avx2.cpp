// AVX2 + FMA softmax pieces: 8 lanes, masked loads for the ragged end of a row (never
// masked stores: see online_row_avx2), exp via a degree-6 polynomial for 2^f on
// [-0.5, 0.5] (relative error < 2e-7, as the AVX-512 path) and an exponent-field build
// for 2^n.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/x86/avx2/cache_avx2.hpp"
#include "kernels/softmax_ops.hpp"

namespace ringattn::kernels {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

inline __m256 exp2_ps(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
  x = _mm256_min_ps(x, _mm256_set1_ps(127.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.5403530393381606e-04f);
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

// The first `count` (< 8) lanes from p; the rest 0 (masked load: fast on every x86).
inline __m256i first_lanes(int count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Stores the first `count` (< 8) lanes of x. Not with vmaskmovps: its store form costs
// tens of cycles on AMD's cores, once per row here, so the lanes go through the stack.
inline void store_first(float* dst, __m256 x, int count) {
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, x);
  std::memcpy(dst, tmp, static_cast<std::size_t>(count) * sizeof(float));
}

// n zeros at p_f32 + j or p_bf16 + j.
inline void zero_fill(float* p_f32, std::uint16_t* p_bf16, int j, int n) {
  if (n <= 0) return;
  if (p_f32) std::memset(p_f32 + j, 0, static_cast<std::size_t>(n) * sizeof(float));
  else std::memset(p_bf16 + j, 0, static_cast<std::size_t>(n) * sizeof(std::uint16_t));
}

// Two passes over the visible columns [lo, hi) only: the max with four independent
// accumulators (a max has 3-4 cycles of latency, one chain would idle the FP pipes), then
// exp and sum on full 8-lane vectors, unmasked; the last ragged vector of each pass is
// loaded masked. Columns outside [lo, hi) are zero-filled by memset, not computed.
// Measured on a Zen 4 with both ISA caps at AVX2 (b 1024, H 8, D 128, fp32): the earlier
// version, which built a lane mask and stored with vmaskmovps on every vector of the row,
// took 13 % of the fold.
float online_row_avx2(const float* s, int n, int lo, int hi, float scale, float* m, float* l,
                      float* p_f32, std::uint16_t* p_bf16) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const __m256 vninf = _mm256_set1_ps(ninf);
  __m256 m0 = vninf, m1 = vninf, m2 = vninf, m3 = vninf;
  int j = lo;
  for (; j + 32 <= hi; j += 32) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(s + j));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(s + j + 8));
    m2 = _mm256_max_ps(m2, _mm256_loadu_ps(s + j + 16));
    m3 = _mm256_max_ps(m3, _mm256_loadu_ps(s + j + 24));
  }
  for (; j + 8 <= hi; j += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(s + j));
  if (j < hi) {
    const __m256i k = first_lanes(hi - j);
    m1 = _mm256_max_ps(m1, _mm256_blendv_ps(vninf, _mm256_maskload_ps(s + j, k), _mm256_castsi256_ps(k)));
  }
  const float mx = hmax(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
  const float m_old = *m;
  const float m_new = std::fmax(m_old, mx * scale);
  if (m_new == ninf) {
    zero_fill(p_f32, p_bf16, 0, n);
    return 1.0f;
  }
  const float alpha = m_old == ninf ? 0.0f : std::exp(m_old - m_new);
  const __m256 c = _mm256_set1_ps(scale * kLog2e);
  const __m256 mc = _mm256_set1_ps(m_new * kLog2e);
  __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
  zero_fill(p_f32, p_bf16, 0, lo);
  // p may alias s: each vector is loaded before the same lanes are stored.
  for (j = lo; j + 16 <= hi; j += 16) {
    const __m256 p0 = exp2_ps(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), c, mc));
    const __m256 p1 = exp2_ps(_mm256_fmsub_ps(_mm256_loadu_ps(s + j + 8), c, mc));
    sum0 = _mm256_add_ps(sum0, p0);  // fp32 sum, see the generic path
    sum1 = _mm256_add_ps(sum1, p1);
    if (p_f32) {
      _mm256_storeu_ps(p_f32 + j, p0);
      _mm256_storeu_ps(p_f32 + j + 8, p1);
    } else {
      store_bf16(p_bf16 + j, to_bf16_ps(p0), 8);
      store_bf16(p_bf16 + j + 8, to_bf16_ps(p1), 8);
    }
  }
  for (; j + 8 <= hi; j += 8) {
    const __m256 p = exp2_ps(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), c, mc));
    sum0 = _mm256_add_ps(sum0, p);
    if (p_f32) _mm256_storeu_ps(p_f32 + j, p);
    else store_bf16(p_bf16 + j, to_bf16_ps(p), 8);
  }
  if (j < hi) {
    const int count = hi - j;
    const __m256i k = first_lanes(count);
    const __m256 p = _mm256_and_ps(exp2_ps(_mm256_fmsub_ps(_mm256_maskload_ps(s + j, k), c, mc)), _mm256_castsi256_ps(k));
    sum1 = _mm256_add_ps(sum1, p);
    if (p_f32) store_first(p_f32 + j, p, count);
    else store_bf16(p_bf16 + j, to_bf16_ps(p), count);
  }
  zero_fill(p_f32, p_bf16, hi, n - hi);
  *l = *l * alpha + hsum(_mm256_add_ps(sum0, sum1));
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

// Full 8-lane vectors, the ragged last one loaded masked and stored through the stack (as
// online_row_avx2); the columns outside [lo, hi) are zero-filled by memset.
void grad_row_avx2(float* s, float* dp, int n, int lo, int hi, float c, float m2, float scale, float delta,
                   std::uint16_t* p_bf16, std::uint16_t* ds_bf16) {
  const __m256 vc = _mm256_set1_ps(c), vm2 = _mm256_set1_ps(m2), vs = _mm256_set1_ps(scale),
               vd = _mm256_set1_ps(delta);
  const bool bf16 = p_bf16 != nullptr;
  auto zeros = [&](int j, int count) {
    zero_fill(bf16 ? nullptr : s, p_bf16, j, count);
    zero_fill(bf16 ? nullptr : dp, ds_bf16, j, count);
  };
  auto store = [&](int j, int count, __m256 p, __m256 ds) {
    if (bf16) {
      store_bf16(p_bf16 + j, to_bf16_ps(p), count);
      store_bf16(ds_bf16 + j, to_bf16_ps(ds), count);
    } else if (count == 8) {
      _mm256_storeu_ps(s + j, p);
      _mm256_storeu_ps(dp + j, ds);
    } else {
      store_first(s + j, p, count);
      store_first(dp + j, ds, count);
    }
  };
  zeros(0, lo);
  int j = lo;
  for (; j + 8 <= hi; j += 8) {
    const __m256 p = exp2_ps(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), vc, vm2));
    store(j, 8, p, _mm256_mul_ps(_mm256_mul_ps(vs, p), _mm256_sub_ps(_mm256_loadu_ps(dp + j), vd)));
  }
  if (j < hi) {
    const __m256i k = first_lanes(hi - j);
    const __m256 p = exp2_ps(_mm256_fmsub_ps(_mm256_maskload_ps(s + j, k), vc, vm2));
    store(j, hi - j, p, _mm256_mul_ps(_mm256_mul_ps(vs, p), _mm256_sub_ps(_mm256_maskload_ps(dp + j, k), vd)));
  }
  zeros(hi, n - hi);
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

}  // namespace

const SoftmaxOps kOpsAvx2 = {"avx2",          online_row_avx2,     rescale_add_avx2,
                             to_bf16_avx2,    from_bf16_avx2,      exp2_avx2,
                             has_non_finite_f32_avx2, has_non_finite_bf16_avx2,
    avx2::cache_scores_f32, avx2::cache_scores_bf16, avx2::cache_pv_f32, avx2::cache_pv_bf16,
    grad_row_avx2};

}  // namespace ringattn::kernels
