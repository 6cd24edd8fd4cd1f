// The (m, l, o) state: creation, merge of two partial states, finalize.
//
// merge is the same rescale-and-add the kernel does per tile, applied to whole states:
// the ring's decode path and the tests' associativity checks use it. Empty rows
// (m = -inf, l = 0) are the identity, so fully masked rows never produce NaN.
//
// Poison (see block_attention.hpp): a (row, head) that saw a non-finite score has
// l = NaN (the kernel also sets m and o to NaN, but a later fold makes m finite again,
// so l is what marks it). Any NaN element of o marks an element that saw a non-finite
// value. Arithmetic alone would lose both: std::fmax drops a NaN m, and an empty side
// (m = -inf) used to be skipped or treated as the identity whatever its l. So merge
// tests for the poison first, and finalize calls a row empty only when l == 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/dispatch.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"

namespace ringattn {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
}

OnlineSoftmaxState::OnlineSoftmaxState(std::int64_t r, std::int64_t h, std::int64_t d)
    : rows(r), heads(h), head_dim(d) {
  if (r < 0 || h < 1 || d < 1)
    throw InvalidArgument("softmax state: bad shape [" + std::to_string(r) + ", " + std::to_string(h) +
                          ", " + std::to_string(d) + "]");
  m.assign(static_cast<std::size_t>(r * h), kNegInf);
  l.assign(static_cast<std::size_t>(r * h), 0.0f);
  o.assign(static_cast<std::size_t>(r * h * d), 0.0f);
}

void OnlineSoftmaxState::reset(std::int64_t r, std::int64_t h, std::int64_t d) {
  if (r < 0 || h < 1 || d < 1)
    throw InvalidArgument("softmax state: bad shape [" + std::to_string(r) + ", " + std::to_string(h) + ", " +
                          std::to_string(d) + "]");
  rows = r;
  heads = h;
  head_dim = d;
  m.assign(static_cast<std::size_t>(r * h), kNegInf);
  l.assign(static_cast<std::size_t>(r * h), 0.0f);
  o.assign(static_cast<std::size_t>(r * h * d), 0.0f);
}

void OnlineSoftmaxState::reset() {
  std::fill(m.begin(), m.end(), kNegInf);
  std::fill(l.begin(), l.end(), 0.0f);
  std::fill(o.begin(), o.end(), 0.0f);
}

void merge(OnlineSoftmaxState& into, const OnlineSoftmaxState& other) {
  if (into.rows != other.rows || into.heads != other.heads || into.head_dim != other.head_dim)
    throw InvalidArgument("merge: states differ in shape ([" + std::to_string(into.rows) + ", " +
                          std::to_string(into.heads) + ", " + std::to_string(into.head_dim) + "] vs [" +
                          std::to_string(other.rows) + ", " + std::to_string(other.heads) + ", " +
                          std::to_string(other.head_dim) + "])");
  const std::int64_t n = into.rows * into.heads, d = into.head_dim;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(i);
    const float ma = into.m[r], mb = other.m[r];
    float* oa = into.o.data() + i * d;
    const float* ob = other.o.data() + i * d;
    if (std::isnan(into.l[r]) || std::isnan(other.l[r]) || std::isnan(ma) || std::isnan(mb)) {
      into.m[r] = kNaN;  // poisoned on either side: poisoned over both
      into.l[r] = kNaN;
      std::fill(oa, oa + d, kNaN);
      continue;
    }
    if (mb == kNegInf) continue;  // other saw nothing for this row
    const float mn = std::fmax(ma, mb);
    const float a = ma == kNegInf ? 0.0f : std::exp(ma - mn);
    const float b = std::exp(mb - mn);
    into.m[r] = mn;
    into.l[r] = into.l[r] * a + other.l[r] * b;
    // A NaN element of either o stays NaN (NaN * 0 is NaN): a poisoned value is never
    // scaled away, even when its side's weight underflows.
    for (std::int64_t j = 0; j < d; ++j) oa[j] = oa[j] * a + ob[j] * b;
  }
}

void finalize(const OnlineSoftmaxState& s, float* out, float* lse) {
  const std::int64_t n = s.rows * s.heads, d = s.head_dim;
  for (std::int64_t i = 0; i < n; ++i) {
    const float l = s.l[static_cast<std::size_t>(i)];
    const bool empty = l == 0.0f;  // not for NaN: a poisoned row finalizes to NaN
    if (out) {
      const float inv = empty ? 0.0f : 1.0f / l;
      for (std::int64_t j = 0; j < d; ++j) out[i * d + j] = s.o[static_cast<std::size_t>(i * d + j)] * inv;
    }
    if (lse) lse[i] = empty ? kNegInf : s.m[static_cast<std::size_t>(i)] + std::log(l);
  }
}

void to_bf16(const float* src, std::uint16_t* dst, std::int64_t n) {
  kernels::ops_for(kernels::resolve_isa(std::nullopt)).to_bf16(src, dst, n);
}

void from_bf16(const std::uint16_t* src, float* dst, std::int64_t n) {
  kernels::ops_for(kernels::resolve_isa(std::nullopt)).from_bf16(src, dst, n);
}

}  // namespace ringattn
