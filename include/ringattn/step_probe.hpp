// ringattn/step_probe.hpp — the forward ring's step taken apart, to measure it.
//
// Ring::forward runs, per step, the fold of the block it holds while the ring pass sends
// that block to the successor and receives the next one from the predecessor (double
// buffering). A RingStepProbe gives a measuring program the two halves separately, on
// the ring's own links, frames, checks and buffers: it can time the fold alone, the
// pass alone, the two in series and the two overlapped, which is what `ringattn bench
// overlap` does. It is an instrument, not a way to compute attention (Ring::forward is
// that): nothing here folds.
//
//   RingStepProbe p(ring, attention, call, own_positions, k, v);   // this rank's block
//   p.post();  ... fold p.current() (or not) ...  p.finish();       // one pass
//
// Every rank of the ring must make the same sequence of probes and passes (the same
// attention config, call numbers and block sizes), or the ring fails as a call with a
// mismatched spec would, naming both ranks. No forward() or decode() may run on the ring
// while a probe is passing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ringattn/block_attention.hpp"
#include "ringattn/positions.hpp"
#include "ringattn/ring.hpp"

namespace ringattn {

class RingStepProbe {
 public:
  // This rank's block of call number `call` (distinct per probe on one ring): K and V of
  // the rows at `positions`, [rows, kv_heads, head_dim] in `attention`'s dtype, copied.
  RingStepProbe(Ring& ring, const BlockAttention& attention, std::uint64_t call, const Positions& positions,
                const void* k, const void* v);
  ~RingStepProbe();
  RingStepProbe(const RingStepProbe&) = delete;
  RingStepProbe& operator=(const RingStepProbe&) = delete;

  // The block held now: this rank's at first, then what each pass brought.
  struct Block {
    int origin = 0;  // the rank whose rows these are
    const Positions* positions = nullptr;
    const void* k = nullptr;  // [rows, kv_heads, head_dim] in the attention's dtype
    const void* v = nullptr;
  };
  Block current() const;
  // One block's bytes on the wire (prefix, positions, K, V).
  std::size_t block_bytes() const;

  void post();    // starts the pass: the held block to the successor, the next from the predecessor
  void finish();  // waits for both; checks what arrived; it becomes current()

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringattn
