// `ringattn bench ring` — the baseline a ring is judged against: the same attention in
// this one process, with as many threads as the whole ring has (nodes x threads per
// node), as a single BlockAttention fold of every query over every key.
//
// Same kernel, same dtype, same mask, same tiling; no processes, sockets or ring steps.
// parallel efficiency = baseline seconds / ring seconds: 1.0 means splitting the work
// across processes and a TCP ring cost nothing over threads sharing memory.
#pragma once

#include <cstdint>
#include <vector>

#include "ringattn/block_attention.hpp"

namespace ringattn::bench {

struct DenseInputs {
  std::int64_t tokens = 0;
  std::vector<float> q, k, v;  // [tokens, heads, d], [tokens, kv_heads, d] x 2, fp32
};

// Median seconds of `reps` folds after one warm-up. cfg.threads is the thread count
// used (the caller sets it to nodes x threads per node); cfg.dtype bf16 converts the
// inputs once, before timing, as a ring node does when it reads its shard.
double single_process_seconds(const AttentionConfig& cfg, const DenseInputs& in, int reps);

}  // namespace ringattn::bench
