// The (m, l, o) state: creation, merge of two partial states, finalize.
//
// merge is the same rescale-and-add the kernel does per tile, applied to whole states:
// the ring's decode path and the tests' associativity checks use it. Empty rows
// (m = -inf) are the identity, so fully masked rows never produce NaN.
#include <cmath>
#include <limits>
#include <string>

#include "kernels/dispatch.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"

namespace ringattn {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
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
    const float ma = into.m[static_cast<std::size_t>(i)], mb = other.m[static_cast<std::size_t>(i)];
    if (mb == kNegInf) continue;  // other saw nothing for this row
    const float mn = std::fmax(ma, mb);
    const float a = ma == kNegInf ? 0.0f : std::exp(ma - mn);
    const float b = std::exp(mb - mn);
    into.m[static_cast<std::size_t>(i)] = mn;
    into.l[static_cast<std::size_t>(i)] = into.l[static_cast<std::size_t>(i)] * a + other.l[static_cast<std::size_t>(i)] * b;
    float* oa = into.o.data() + i * d;
    const float* ob = other.o.data() + i * d;
    for (std::int64_t j = 0; j < d; ++j) oa[j] = oa[j] * a + ob[j] * b;
  }
}

void finalize(const OnlineSoftmaxState& s, float* out, float* lse) {
  const std::int64_t n = s.rows * s.heads, d = s.head_dim;
  for (std::int64_t i = 0; i < n; ++i) {
    const float l = s.l[static_cast<std::size_t>(i)];
    const bool empty = !(l > 0.0f);
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
