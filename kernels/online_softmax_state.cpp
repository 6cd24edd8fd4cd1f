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
#include "kernels/kernel_setup.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"

namespace ringattn {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::int64_t kMaxStateElements = std::int64_t{1} << 40;  // of o: 4 TiB, beyond any node

std::string shape(std::int64_t r, std::int64_t h, std::int64_t d) {
  return "[" + std::to_string(r) + ", " + std::to_string(h) + ", " + std::to_string(d) + "]";
}

// Rows x heads, or InvalidArgument: heads and head_dim in 1..2^16 (the ring's limits'
// range) and at most kMaxStateElements elements of o, checked before anything is sized.
std::int64_t checked_rows_heads(std::int64_t r, std::int64_t h, std::int64_t d) {
  constexpr std::int64_t kMaxHeadsOrDim = 1 << 16;
  if (r < 0 || h < 1 || d < 1 || h > kMaxHeadsOrDim || d > kMaxHeadsOrDim)
    throw InvalidArgument("softmax state: bad shape " + shape(r, h, d) +
                          " (rows >= 0, heads and head_dim in 1..65536)");
  if (r > kMaxStateElements / (h * d))
    throw InvalidArgument("softmax state: shape " + shape(r, h, d) + " holds more than 2^40 elements");
  return r * h;
}
}  // namespace

namespace kernels {

void check_state(const OnlineSoftmaxState& s, const char* who) {
  // Overflow-checked: the fields are the caller's, and a wrapped product could match.
  std::int64_t rh = 0, rhd = 0;
  if (s.rows < 0 || s.heads < 0 || s.head_dim < 0 || __builtin_mul_overflow(s.rows, s.heads, &rh) ||
      __builtin_mul_overflow(rh, s.head_dim, &rhd) || s.m.size() != static_cast<std::size_t>(rh) ||
      s.l.size() != static_cast<std::size_t>(rh) || s.o.size() != static_cast<std::size_t>(rhd))
    throw InvalidArgument(std::string(who) + ": the state's shape " + shape(s.rows, s.heads, s.head_dim) +
                          " does not match its arrays (m " + std::to_string(s.m.size()) + ", l " +
                          std::to_string(s.l.size()) + ", o " + std::to_string(s.o.size()) +
                          " elements); make it with OnlineSoftmaxState(rows, heads, head_dim) or reset()");
}

}  // namespace kernels

OnlineSoftmaxState::OnlineSoftmaxState(std::int64_t r, std::int64_t h, std::int64_t d)
    : rows(r), heads(h), head_dim(d) {
  const std::int64_t rh = checked_rows_heads(r, h, d);
  m.assign(static_cast<std::size_t>(rh), kNegInf);
  l.assign(static_cast<std::size_t>(rh), 0.0f);
  o.assign(static_cast<std::size_t>(rh * d), 0.0f);
}

void OnlineSoftmaxState::reset(std::int64_t r, std::int64_t h, std::int64_t d) {
  const std::int64_t rh = checked_rows_heads(r, h, d);
  rows = r;
  heads = h;
  head_dim = d;
  m.assign(static_cast<std::size_t>(rh), kNegInf);
  l.assign(static_cast<std::size_t>(rh), 0.0f);
  o.assign(static_cast<std::size_t>(rh * d), 0.0f);
}

void OnlineSoftmaxState::reset() {
  std::fill(m.begin(), m.end(), kNegInf);
  std::fill(l.begin(), l.end(), 0.0f);
  std::fill(o.begin(), o.end(), 0.0f);
}

void merge(OnlineSoftmaxState& into, const OnlineSoftmaxState& other) {
  kernels::check_state(into, "merge");
  kernels::check_state(other, "merge");
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
  kernels::check_state(s, "finalize");
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
