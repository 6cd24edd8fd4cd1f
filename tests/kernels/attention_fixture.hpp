// Shared helpers for the kernel tests: seeded inputs, the kernel run over a list of
// key pieces, and comparison against the float64 dense reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "src/oracle/random_inputs.hpp"
#include "src/oracle/reference.hpp"
#include "ringattn/block_attention.hpp"

namespace fixture {

using namespace ringattn;

using oracle::random_normal;
using oracle::round_to_bf16;

struct Problem {
  std::int64_t nq, nk, heads, kv_heads, head_dim;
  Mask mask;
  std::int64_t q_first, k_first;  // global position offsets
  DType dtype = DType::f32;
  unsigned seed = 1;

  Problem(std::int64_t nq_, std::int64_t nk_, std::int64_t heads_, std::int64_t kv_heads_, std::int64_t head_dim_,
          Mask mask_, std::int64_t q_first_, std::int64_t k_first_, DType dtype_, unsigned seed_)
      : nq(nq_), nk(nk_), heads(heads_), kv_heads(kv_heads_), head_dim(head_dim_), mask(mask_), q_first(q_first_),
        k_first(k_first_), dtype(dtype_), seed(seed_) {}

  std::vector<float> q, k, v;
  std::vector<std::uint16_t> qh, kh, vh;

  void make() {
    q = random_normal(static_cast<std::size_t>(nq * heads * head_dim), seed);
    k = random_normal(static_cast<std::size_t>(nk * kv_heads * head_dim), seed + 101);
    v = random_normal(static_cast<std::size_t>(nk * kv_heads * head_dim), seed + 202);
    if (dtype == DType::bf16) {
      qh = round_to_bf16(q);
      kh = round_to_bf16(k);
      vh = round_to_bf16(v);
    }
  }
  const void* qp() const { return dtype == DType::bf16 ? static_cast<const void*>(qh.data()) : q.data(); }
  const void* kp(std::int64_t row) const {
    const std::int64_t off = row * kv_heads * head_dim;
    return dtype == DType::bf16 ? static_cast<const void*>(kh.data() + off) : static_cast<const void*>(k.data() + off);
  }
  const void* vp(std::int64_t row) const {
    const std::int64_t off = row * kv_heads * head_dim;
    return dtype == DType::bf16 ? static_cast<const void*>(vh.data() + off) : static_cast<const void*>(v.data() + off);
  }
  Positions q_pos() const { return Positions::contiguous(q_first, nq); }
  Positions k_pos(std::int64_t r0, std::int64_t n) const { return Positions::contiguous(k_first + r0, n); }
  AttentionConfig config(std::optional<Isa> isa) const {
    AttentionConfig c;
    c.heads = heads;
    c.kv_heads = kv_heads;
    c.head_dim = head_dim;
    c.dtype = dtype;
    c.mask = mask;
    c.isa = isa;
    return c;
  }

  // Dense float64 reference over all keys.
  void reference(std::vector<double>& out, std::vector<double>& lse) const {
    out.assign(static_cast<std::size_t>(nq * heads * head_dim), 0);
    lse.assign(static_cast<std::size_t>(nq * heads), 0);
    oracle::dense_attention_f64({heads, kv_heads, head_dim, mask, 0.0}, q.data(), q_pos(), k.data(), v.data(),
                                 k_pos(0, nk), out.data(), lse.data());
  }
};

struct Errors {
  double out = 0, lse = 0;
  bool nan = false;
};

inline Errors compare(const std::vector<float>& out, const std::vector<float>& lse, const std::vector<double>& rout,
                      const std::vector<double>& rlse) {
  Errors e;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) e.nan = true;
    e.out = std::fmax(e.out, std::fabs(out[i] - rout[i]));
  }
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (std::isnan(lse[i])) e.nan = true;
    if (std::isinf(rlse[i])) {
      if (!(std::isinf(lse[i]) && lse[i] < 0)) e.lse = 1e30;
    } else {
      e.lse = std::fmax(e.lse, std::fabs(lse[i] - rlse[i]));
    }
  }
  return e;
}

}  // namespace fixture
