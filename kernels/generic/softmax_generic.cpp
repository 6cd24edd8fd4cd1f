// Generic (scalar) softmax pieces: portable, exact to libm, and the test oracle for
// the SIMD paths.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cache_loops.hpp"
#include "kernels/softmax_ops.hpp"

namespace ringattn::kernels {
namespace {

std::uint16_t round_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float online_row_generic(const float* s, int n, int lo, int hi, float scale, float* m, float* l,
                         float* p_f32, std::uint16_t* p_bf16) {
  const float ninf = -std::numeric_limits<float>::infinity();
  float mx = ninf;
  for (int j = lo; j < hi; ++j) mx = std::fmax(mx, s[j]);
  const float m_old = *m;
  const float m_new = std::fmax(m_old, mx * scale);
  float alpha = 1.0f;
  float sum = 0.0f;
  if (m_new == ninf) {  // nothing visible yet: the row stays empty
    for (int j = 0; j < n; ++j) {
      if (p_f32) p_f32[j] = 0.0f;
      if (p_bf16) p_bf16[j] = 0;
    }
    return 1.0f;
  }
  alpha = m_old == ninf ? 0.0f : std::exp(m_old - m_new);
  for (int j = 0; j < n; ++j) {
    float p = 0.0f;
    if (j >= lo && j < hi) p = std::exp(s[j] * scale - m_new);
    // l sums the fp32 probabilities (as FlashAttention does): the bf16 rounding of P
    // is unbiased noise in o, but summing rounded values would bias lse.
    sum += p;
    if (p_f32) p_f32[j] = p;
    else p_bf16[j] = round_bf16(p);
  }
  *l = *l * alpha + sum;
  *m = m_new;
  return alpha;
}

void rescale_add_generic(float* o, const float* t, float alpha, int n) {
  for (int i = 0; i < n; ++i) o[i] = o[i] * alpha + t[i];
}

void to_bf16_generic(const float* src, std::uint16_t* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = round_bf16(src[i]);
}

void from_bf16_generic(const std::uint16_t* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &u, 4);
  }
}

void grad_row_generic(float* s, float* dp, int n, int lo, int hi, float c, float m2, float scale, float delta,
                      std::uint16_t* p_bf16, std::uint16_t* ds_bf16) {
  for (int j = 0; j < n; ++j) {
    float p = 0.0f, ds = 0.0f;
    if (j >= lo && j < hi) {
      p = std::exp2(s[j] * c - m2);
      ds = scale * p * (dp[j] - delta);
    }
    if (p_bf16) {
      p_bf16[j] = round_bf16(p);
      ds_bf16[j] = round_bf16(ds);
    } else {
      s[j] = p;
      dp[j] = ds;
    }
  }
}

void exp2_generic(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = std::exp2(x[i]);
}

// Adding one to the exponent field carries into the top bit only when the field is all
// ones (NaN or +-inf); ORed over the row, the top bit says whether any element was.
bool has_non_finite_f32_generic(const float* x, std::int64_t n) {
  std::uint32_t bits = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, &x[i], 4);
    bits |= (u & 0x7f800000u) + 0x00800000u;
  }
  return (bits >> 31) != 0;
}

bool has_non_finite_bf16_generic(const std::uint16_t* x, std::int64_t n) {
  std::uint16_t bits = 0;  // 16-bit lanes: widening each element would halve the vector width
  for (std::int64_t i = 0; i < n; ++i) bits |= static_cast<std::uint16_t>((x[i] & 0x7f80u) + 0x0080u);
  return (bits >> 15) != 0;
}

RINGATTN_CACHE_LOOPS(generic)

}  // namespace

const SoftmaxOps kOpsGeneric = {"generic",          online_row_generic,     rescale_add_generic,
                                to_bf16_generic,    from_bf16_generic,      exp2_generic,
                                has_non_finite_f32_generic, has_non_finite_bf16_generic,
    cache_scores_f32_generic, cache_scores_bf16_generic, cache_pv_f32_generic, cache_pv_bf16_generic,
    grad_row_generic};

}  // namespace ringattn::kernels
