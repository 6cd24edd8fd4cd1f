// ringattn — what every rotating call (forward, backward) checks before anything is sent,
// and the test that lets a step be relayed without computing. Not installed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "ring/ring_impl.hpp"
#include "ring/ring_step.hpp"

namespace ringattn::ring {

// A call after its checks: the queries' positions and documents, the forward kernel
// (whose config holds the resolved scale every rank compares).
struct CheckedCall {
  Positions qpos;
  std::span<const std::int32_t> docs;
  BlockAttention& kernel;
};

// Everything a call must satisfy, each checked once, before anything is sent: a bad call
// leaves the ring usable. Throws InvalidArgument "rank R: <call>: what is wrong". lse may
// be empty (forward's is optional; backward checks its own).
CheckedCall check_call(Ring::Impl& im, const char* call, const AttentionSpec& spec, std::span<const float> q,
                       std::span<const float> k, std::span<const float> v, std::span<const std::int64_t> positions,
                       std::optional<std::span<const std::int32_t>> documents, std::span<const float> o,
                       std::span<const float> lse);

// Throws InvalidArgument "rank R: <call>: scope N is not ..." unless `scope` is one of the
// three: a Scope cast from another integer would index past the mesh's per-scope arrays.
void check_scope(const Ring::Impl& im, Scope scope, const char* call);

// Whether the block can hold no pair this rank's queries see, from the ends of both
// sides' positions (increasing) and documents (non-decreasing): then the step is
// relayed and not computed.
bool step_hidden(const Mask& mask, std::span<const std::int64_t> qpos, std::span<const std::int32_t> qdocs,
                 const RingStep::View& blk);

// For a rotation's length: this rank busy, and `kernel` ticking the transport's keep-alive
// counter per tile (wait() marks the waits itself), so a fold that takes minutes is seen
// progressing; the counter is unhooked again when the rotation ends, also by a throw.
template <class Kernel>
class BusyKernel {
 public:
  BusyKernel(net::Transport& t, Kernel& kernel) : busy_(t.liveness().enter(net::PeerState::busy)), kernel_(kernel) {
    kernel_.set_progress_counter(&t.liveness().counter());
  }
  ~BusyKernel() { kernel_.set_progress_counter(nullptr); }
  BusyKernel(const BusyKernel&) = delete;
  BusyKernel& operator=(const BusyKernel&) = delete;

 private:
  net::Liveness::Scope busy_;
  Kernel& kernel_;
};

// backward()'s own inputs after check_call: lse given, the sizes of d_o, dq, dk, dv, no
// output sharing memory with an input or another output, finite q, k, v, d_o and an lse
// that forward() could have returned. Throws InvalidArgument starting with `who`.
void check_backward_inputs(const std::string& who, const AttentionSpec& spec, std::int64_t rows,
                           std::span<const float> q, std::span<const float> k, std::span<const float> v,
                           std::span<const float> o, std::span<const float> lse, std::span<const float> d_o,
                           std::span<float> dq, std::span<float> dk, std::span<float> dv);

// Inside a catch: the call failed in the rotation. A network failure breaks the ring; a
// send that may still read the caller's K and V is ended, and the ring with it. Rethrows.
[[noreturn]] void fail_call(Ring::Impl& im);

}  // namespace ringattn::ring
