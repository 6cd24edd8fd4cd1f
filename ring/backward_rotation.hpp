// ringattn — the backward rotation: forward's K/V rotation (rotation.hpp) with its own
// step's work, and the gradient relay (each block's dK/dV accumulators one hop behind it,
// gradient_relay.hpp). Ring::backward runs it on the whole ring; the hybrid schedule on the
// ranks across a mesh's groups.
//
//   (the caller: D = rowsum(dO o O) once; dQ = 0; step.begin with this rank's K/V)
//   step s = 0 .. P-1, holding the K/V block of origin r - s:
//     if s < P-1: post the K/V pass (send this block on, receive the next)
//     dQ += this block's share; acc = these queries' share of the block's dK, dV
//     s = 0: send acc (this rank's own block's first share)
//     s > 0: wait the block's accumulators (sent by the predecessor after its step s-1),
//            add acc, send them on
//     if s < P-1: finish the K/V pass
//   wait this rank's own accumulators, complete after P shares: dK, dV
//
// At step s the kernel computes while the next K/V block and the previous block's
// accumulators travel, so both transfers hide behind it as forward's does; only the O(b d)
// add of the accumulators waits for them.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ring/block_format.hpp"
#include "ring/gradient_relay.hpp"
#include "ring/internals.hpp"
#include "ring/ring_step.hpp"
#include "ringattn/block_backward.hpp"
#include "ringattn/ring.hpp"

namespace ringattn::ring {

// This rank's side of one backward rotation: its queries and what their gradients need.
struct BackwardBlock {
  BlockAttentionBackward& kernel;
  CallSpec cs;  // backward = true
  Mask mask;
  const Positions& qpos;
  std::span<const std::int64_t> positions;  // qpos as a span (a block the mask hides is skipped)
  std::span<const std::int32_t> docs;       // this rank's documents, or empty
  const void* q;                            // in cs.dtype
  const void* d_o;                          // in cs.dtype
  const float* lse;
  const float* delta;
  float *dq, *dk, *dv;  // dq accumulates in place (zeroed by the caller); dk, dv: the results
};

// The rotation on `step` (begun by the caller with this rank's K/V) and `grads` (on the same
// transport), call number `call`. acc_k, acc_v: a pooled pair for blocks with more rows than
// this rank's. A throw leaves passes posted: the caller fails the call.
void rotate_and_accumulate(RingStep& step, GradientRelay& grads, std::uint64_t call, const std::function<void(int)>& observer,
                           const RingInternals::StepHook& hook, const BackwardBlock& c, std::vector<float>& acc_k,
                           std::vector<float>& acc_v, BackwardStats& st);

}  // namespace ringattn::ring
