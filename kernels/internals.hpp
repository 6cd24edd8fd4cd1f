// ringattn — the kernel's entry for the ring, not public API: a fold whose document ids
// the caller has already checked once per call (the ring checks its own rows' documents
// when the call starts and every visiting block's when its frame arrives, ring_step.cpp),
// so the kernel does not walk them again at every step. Sizes are still checked.
#pragma once

#include <cstdint>
#include <span>

#include "ringattn/block_attention.hpp"

namespace ringattn {

struct KernelInternals {
  // BlockAttention::fold with documents, without re-checking that they never decrease.
  static FoldStats fold_checked(BlockAttention& kernel, const void* q, const Positions& q_pos,
                                std::span<const std::int32_t> q_docs, const void* k, const void* v,
                                const Positions& k_pos, std::span<const std::int32_t> k_docs,
                                OnlineSoftmaxState& state);
};

}  // namespace ringattn
