// RingStepProbe (ringattn/step_probe.hpp): forward's ring step (ring_step.hpp) on the
// ring's transport, with its passes numbered in the order they are made.
#include "ringattn/step_probe.hpp"

#include <string>

#include "ring/block_format.hpp"
#include "ring/internals.hpp"
#include "ring/ring_step.hpp"

namespace ringattn {

struct RingStepProbe::Impl {
  explicit Impl(Ring& ring) : step(RingInternals::transport(ring), RingInternals::max_block_rows(ring)) {}
  ring::RingStep step;
  int pass = 0;
};

RingStepProbe::RingStepProbe(Ring& ring, const BlockAttention& attention, std::uint64_t call, const Positions& positions,
                             const void* k, const void* v)
    : impl_(std::make_unique<Impl>(ring)) {
  const AttentionConfig& c = attention.config();
  // The ring's limits, as forward() checks them: the spec goes on the wire in 32 bits and
  // sizes the block (kv_heads * head_dim, rows) before anything is sent.
  RingInternals::check_limits(ring, c, positions.size(), "rank " + std::to_string(ring.rank()) + ": RingStepProbe: ");
  impl_->step.begin_raw(ring::call_spec(c, c.scale), call, positions, k, v);
}

RingStepProbe::~RingStepProbe() = default;

RingStepProbe::Block RingStepProbe::current() const {
  const auto& view = impl_->step.current();
  return {view.origin, view.positions, view.k, view.v};
}

std::size_t RingStepProbe::block_bytes() const { return impl_->step.block_bytes(); }

void RingStepProbe::post() { impl_->step.post(impl_->pass); }

void RingStepProbe::finish() { impl_->step.finish(impl_->pass++); }

}  // namespace ringattn
