// ringattn — the K/V rotation: the one loop both attention passes make over the ring step
// (ring_step.hpp). Forward folds each visiting block into its online-softmax state
// (ring.cpp); backward accumulates each block's gradients and relays its dK/dV one hop
// behind it (backward.cpp). Only the work of a step differs; the loop is this one.
//
//   begin: the caller's RingStep::begin (this rank's block is current)
//   step s = 0 .. P-1, holding the block of origin (rank - s) mod P:
//     the observer (Ring::on_step), the fault hook (tests)
//     if s < P-1: post the pass (send this block on, receive the next)
//     work(s, block)                       -- overlaps both transfers
//     if s < P-1: finish the pass (checks the block that came)
//
// Invariant: the block work(s, ...) reads is the one of origin (rank - s) mod P and stays
// valid for that call; the next one travels meanwhile into the other buffer.
#pragma once

#include <chrono>

#include "ring/ring_impl.hpp"
#include "ring/ring_step.hpp"

namespace ringattn::ring {

struct RotationStats {
  int steps = 0;
  double wait_seconds = 0;  // in finish: the part of each transfer the work did not hide
};

// work(int s, const RingStep::View& block), on the ring of `step`'s transport (the whole
// ring, or the ranks across a mesh's groups). A throw leaves the pass posted: the caller
// fails the call (fail_call), which ends the ring.
template <class Work>
RotationStats rotate(RingStep& step, const std::function<void(int)>& observer, const RingInternals::StepHook& hook,
                     Work&& work) {
  using Clock = std::chrono::steady_clock;
  net::Transport& t = step.transport();
  const int P = t.world();
  RotationStats st;
  for (int s = 0; s < P; ++s) {
    if (observer) observer(s);
    if (hook) hook(s, step.block(), t.liveness().counter());
    const auto& blk = step.current();
    if (s + 1 < P) step.post(s);
    ++st.steps;
    work(s, blk);
    if (s + 1 < P) {
      const auto t0 = Clock::now();
      step.finish(s);
      st.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  return st;
}

// The ring's own rotation: all its ranks, its observer (Ring::on_step) and fault hook.
template <class Work>
RotationStats rotate(Ring::Impl& im, Work&& work) {
  return rotate(*im.step, im.observer, im.hook, std::forward<Work>(work));
}

}  // namespace ringattn::ring
