// NEON softmax pieces (aarch64): 4 lanes, scalar handling of the ragged row edges,
// exp via a degree-7 polynomial for 2^f and an exponent-field build for 2^n.
#include <arm_neon.h>

#include <cmath>
#include <limits>

#include "kernels/cache_loops.hpp"
#include "kernels/softmax_ops.hpp"

namespace ringattn::kernels {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

inline float32x4_t exp2_ps(float32x4_t x) {
  x = vmaxq_f32(x, vdupq_n_f32(-126.0f));
  x = vminq_f32(x, vdupq_n_f32(127.0f));
  const float32x4_t n = vrndnq_f32(x);
  const float32x4_t f = vsubq_f32(x, n);
  float32x4_t p = vdupq_n_f32(1.525273380405984e-05f);
  p = vfmaq_f32(vdupq_n_f32(1.5403530393381606e-04f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.3333558146428443e-03f), p, f);
  p = vfmaq_f32(vdupq_n_f32(9.618129107628477e-03f), p, f);
  p = vfmaq_f32(vdupq_n_f32(5.550410866482158e-02f), p, f);
  p = vfmaq_f32(vdupq_n_f32(2.402265069591007e-01f), p, f);
  p = vfmaq_f32(vdupq_n_f32(6.931471805599453e-01f), p, f);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

inline uint16x4_t to_bf16_ps(float32x4_t x) {
  const uint32x4_t u = vreinterpretq_u32_f32(x);
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  return vshrn_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
}

inline float32x4_t from_bf16_ps(uint16x4_t h) {
  return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

// One lane at a time through the same vector code, so edges round like the body.
inline float exp2_one(float x) { return vgetq_lane_f32(exp2_ps(vdupq_n_f32(x)), 0); }
inline std::uint16_t bf16_one(float x) { return vget_lane_u16(to_bf16_ps(vdupq_n_f32(x)), 0); }

float online_row_neon(const float* s, int n, int lo, int hi, float scale, float* m, float* l,
                      float* p_f32, std::uint16_t* p_bf16) {
  const float ninf = -std::numeric_limits<float>::infinity();
  float mx = ninf;
  {
    int j = lo;
    float32x4_t vmax = vdupq_n_f32(ninf);
    for (; j + 4 <= hi; j += 4) vmax = vmaxq_f32(vmax, vld1q_f32(s + j));
    mx = vmaxvq_f32(vmax);
    for (; j < hi; ++j) mx = std::fmax(mx, s[j]);
  }
  const float m_old = *m;
  const float m_new = std::fmax(m_old, mx * scale);
  if (m_new == ninf) {
    for (int j = 0; j < n; ++j) {
      if (p_f32) p_f32[j] = 0.0f;
      else p_bf16[j] = 0;
    }
    return 1.0f;
  }
  const float alpha = m_old == ninf ? 0.0f : std::exp(m_old - m_new);
  const float c = scale * kLog2e, m2 = m_new * kLog2e;
  float sum = 0.0f;
  for (int j = 0; j < lo; ++j) {
    if (p_f32) p_f32[j] = 0.0f;
    else p_bf16[j] = 0;
  }
  int j = lo;
  float32x4_t vsum = vdupq_n_f32(0.0f);
  const float32x4_t vc = vdupq_n_f32(c), vm2 = vdupq_n_f32(m2);
  for (; j + 4 <= hi; j += 4) {
    const float32x4_t p = exp2_ps(vsubq_f32(vmulq_f32(vld1q_f32(s + j), vc), vm2));
    vsum = vaddq_f32(vsum, p);  // fp32 sum, see the generic path
    if (p_f32) vst1q_f32(p_f32 + j, p);
    else vst1_u16(p_bf16 + j, to_bf16_ps(p));
  }
  sum = vaddvq_f32(vsum);
  for (; j < hi; ++j) {
    const float p = exp2_one(s[j] * c - m2);
    sum += p;
    if (p_f32) p_f32[j] = p;
    else p_bf16[j] = bf16_one(p);
  }
  for (j = hi; j < n; ++j) {
    if (p_f32) p_f32[j] = 0.0f;
    else p_bf16[j] = 0;
  }
  *l = *l * alpha + sum;
  *m = m_new;
  return alpha;
}

void rescale_add_neon(float* o, const float* t, float alpha, int n) {
  const float32x4_t a = vdupq_n_f32(alpha);
  int i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(o + i, vfmaq_f32(vld1q_f32(t + i), vld1q_f32(o + i), a));
  for (; i < n; ++i) o[i] = o[i] * alpha + t[i];
}

void to_bf16_neon(const float* src, std::uint16_t* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t x = vld1q_f32(src + i);
    if (vminvq_u32(vceqq_f32(x, x)) == 0) break;  // a NaN: scalar below
    vst1_u16(dst + i, to_bf16_ps(x));
  }
  kOpsGeneric.to_bf16(src + i, dst + i, n - i);
}

void from_bf16_neon(const std::uint16_t* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, from_bf16_ps(vld1_u16(src + i)));
  kOpsGeneric.from_bf16(src + i, dst + i, n - i);
}

// 4-lane vectors, the ragged edge one lane at a time through the same vector code.
void grad_row_neon(float* s, float* dp, int n, int lo, int hi, float c, float m2, float scale, float delta,
                   std::uint16_t* p_bf16, std::uint16_t* ds_bf16) {
  const float32x4_t vc = vdupq_n_f32(c), vm2 = vdupq_n_f32(m2), vs = vdupq_n_f32(scale), vd = vdupq_n_f32(delta);
  const bool bf16 = p_bf16 != nullptr;
  auto zero = [&](int j) {
    if (bf16) p_bf16[j] = ds_bf16[j] = 0;
    else s[j] = dp[j] = 0.0f;
  };
  for (int j = 0; j < lo; ++j) zero(j);
  int j = lo;
  for (; j + 4 <= hi; j += 4) {
    const float32x4_t p = exp2_ps(vsubq_f32(vmulq_f32(vld1q_f32(s + j), vc), vm2));
    const float32x4_t ds = vmulq_f32(vmulq_f32(vs, p), vsubq_f32(vld1q_f32(dp + j), vd));
    if (bf16) {
      vst1_u16(p_bf16 + j, to_bf16_ps(p));
      vst1_u16(ds_bf16 + j, to_bf16_ps(ds));
    } else {
      vst1q_f32(s + j, p);
      vst1q_f32(dp + j, ds);
    }
  }
  for (; j < hi; ++j) {
    const float p = exp2_one(s[j] * c - m2), ds = scale * p * (dp[j] - delta);
    if (bf16) {
      p_bf16[j] = bf16_one(p);
      ds_bf16[j] = bf16_one(ds);
    } else {
      s[j] = p;
      dp[j] = ds;
    }
  }
  for (j = hi; j < n; ++j) zero(j);
}

void exp2_neon(const float* x, float* y, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, exp2_ps(vld1q_f32(x + i)));
  for (; i < n; ++i) y[i] = exp2_one(x[i]);
}

// The exponent-carry test of the generic path, 4 floats or 8 bf16 at a time; the
// ragged tail goes through the generic one.
bool has_non_finite_f32_neon(const float* x, std::int64_t n) {
  const uint32x4_t expo = vdupq_n_u32(0x7f800000u), one = vdupq_n_u32(0x00800000u);
  uint32x4_t acc = vdupq_n_u32(0);
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    acc = vorrq_u32(acc, vaddq_u32(vandq_u32(vreinterpretq_u32_f32(vld1q_f32(x + i)), expo), one));
  return (vmaxvq_u32(acc) >> 31) != 0 || kOpsGeneric.has_non_finite_f32(x + i, n - i);
}

bool has_non_finite_bf16_neon(const std::uint16_t* x, std::int64_t n) {
  const uint16x8_t expo = vdupq_n_u16(0x7f80), one = vdupq_n_u16(0x0080);
  uint16x8_t acc = vdupq_n_u16(0);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = vorrq_u16(acc, vaddq_u16(vandq_u16(vld1q_u16(x + i), expo), one));
  return (vmaxvq_u16(acc) >> 15) != 0 || kOpsGeneric.has_non_finite_bf16(x + i, n - i);
}

RINGATTN_CACHE_LOOPS(neon)

}  // namespace

const SoftmaxOps kOpsNeon = {"neon",          online_row_neon,     rescale_add_neon,
                             to_bf16_neon,    from_bf16_neon,      exp2_neon,
                             has_non_finite_f32_neon, has_non_finite_bf16_neon,
    cache_scores_f32_neon, cache_scores_bf16_neon, cache_pv_f32_neon, cache_pv_bf16_neon,
    grad_row_neon};

}  // namespace ringattn::kernels
