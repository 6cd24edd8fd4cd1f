// `ringattn bench ring` — the baseline a ring is judged against: the same attention in
// this one process, with as many threads as the whole ring has (nodes x threads per
// node), as a single BlockAttention fold of every query over every key.
//
// Same kernel, same dtype, same mask, same tiling; no processes, sockets or ring steps.
// parallel efficiency = baseline seconds / ring seconds: 1.0 means splitting the work
// across processes and a TCP ring cost nothing over threads sharing memory.
//
// The bench alternates baseline and ring repetitions rather than timing one block after
// the other, so that a slow phase of a shared machine hits both sides alike.
#pragma once

#include <cstdint>
#include <vector>

#include "ringattn/block_attention.hpp"

namespace ringattn::bench {

struct DenseInputs {
  std::int64_t tokens = 0;
  std::vector<float> q, k, v;  // [tokens, heads, d], [tokens, kv_heads, d] x 2, fp32
};

class SingleProcessBaseline {
 public:
  // cfg.threads is the thread count used (the caller sets it to nodes x threads per
  // node); cfg.dtype bf16 converts the inputs once, here, as a ring node does when it
  // reads its shard. The kernel's primitives are created by the first run.
  SingleProcessBaseline(const AttentionConfig& cfg, const DenseInputs& in);

  // One fold of the whole sequence; returns its seconds. `in` must outlive this.
  double run_once();

 private:
  AttentionConfig cfg_;
  const DenseInputs& in_;                      // fp32 inputs, used as they are
  std::vector<std::uint16_t> q16_, k16_, v16_;  // bf16 copies, only for a bf16 run
  BlockAttention attn_;
  OnlineSoftmaxState state_;
};

}  // namespace ringattn::bench
