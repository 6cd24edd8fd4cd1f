// ringattn — the kernel's entry for the ring, not public API: a fold whose document ids
// the caller has already checked once per call (the ring checks its own rows' documents
// when the call starts and every visiting block's when its frame arrives, ring_step.cpp),
// so the kernel does not walk them again at every step. Sizes are still checked.
#pragma once

#include <cstdint>
#include <span>

#include "ringattn/block_attention.hpp"
#include "ringattn/block_backward.hpp"

namespace ringattn {

struct KernelInternals {
  // BlockAttention::fold with documents, without re-checking that they never decrease.
  static FoldStats fold_checked(BlockAttention& kernel, const void* q, const Positions& q_pos,
                                std::span<const std::int32_t> q_docs, const void* k, const void* v,
                                const Positions& k_pos, std::span<const std::int32_t> k_docs,
                                OnlineSoftmaxState& state);
  // BlockAttentionBackward::accumulate without re-checking documents or finiteness: the
  // ring checks its own rows once per call and each visiting block came from a rank that
  // checked its own.
  static GradientStats accumulate_checked(BlockAttentionBackward& kernel, const void* q, const Positions& q_pos,
                                          std::span<const std::int32_t> q_docs, const void* k, const void* v,
                                          const Positions& k_pos, std::span<const std::int32_t> k_docs,
                                          const void* d_o, const float* lse, const float* delta, float* dq,
                                          float* dk, float* dv);
};

}  // namespace ringattn
