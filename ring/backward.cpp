// Ring::backward (include/ringattn/ring.hpp): its checks, D = rowsum(dO o O), and the
// backward rotation (ring/backward_rotation.hpp) on the ring's step and gradient relay.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "ring/schedules.hpp"
#include "kernels/internals.hpp"
#include "ring/call_checks.hpp"
#include "ring/backward_rotation.hpp"
#include "ring/gradient_relay.hpp"
#include "ring/ring_impl.hpp"
#include "ring/rotation.hpp"
#include "ringattn/block_backward.hpp"
#include "ringattn/error.hpp"
#include "ringattn/ring.hpp"

namespace ringattn {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Every backward() and backward_in(): `documents` unset for a call without them.
BackwardStats backward_call(Ring::Impl& im, Scope scope, const AttentionSpec& spec, std::span<const float> q,
                            std::span<const float> k, std::span<const float> v,
                            std::span<const std::int64_t> positions,
                            std::optional<std::span<const std::int32_t>> documents, std::span<const float> o,
                            std::span<const float> lse, std::span<const float> d_o, std::span<float> dq,
                            std::span<float> dk, std::span<float> dv) {
  const auto start = Clock::now();
  im.check_usable();
  ring::check_scope(im, scope, "backward");
  const std::string who = "rank " + std::to_string(im.options.rank) + ": backward: ";
  auto bad = [&](const std::string& what) { throw InvalidArgument(who + what); };
  const ring::CheckedCall fc = ring::check_call(im, "backward", spec, q, k, v, positions, documents, o, lse);
  const auto rows = static_cast<std::int64_t>(positions.size());
  ring::check_backward_inputs(who, spec, rows, q, k, v, o, lse, d_o, dq, dk, dv);
  const std::int64_t H = spec.heads, D = spec.head_dim;
  BlockAttentionBackward& kernel = im.backward_kernel_for(spec);
  auto& delta = im.backward.delta;
  delta.resize(static_cast<std::size_t>(rows * H));
  try {
    attention_backward_delta(o.data(), d_o.data(), rows, H, D, delta.data(), im.options.threads);
  } catch (const InvalidArgument& e) {
    bad(e.what());
  }
  ring::CallSpec cs = ring::call_spec(spec, fc.kernel.config().scale, documents.has_value());
  cs.backward = true;
  const void* qp = q.data();
  const void* dop = d_o.data();
  if (spec.dtype == DType::bf16) {
    im.q_bf16.resize(q.size());
    to_bf16(q.data(), im.q_bf16.data(), static_cast<std::int64_t>(q.size()));
    qp = im.q_bf16.data();
    im.backward.d_o_bf16.resize(d_o.size());
    to_bf16(d_o.data(), im.backward.d_o_bf16.data(), static_cast<std::int64_t>(d_o.size()));
    dop = im.backward.d_o_bf16.data();
  }
  std::fill(dq.begin(), dq.end(), 0.0f);
  const ring::BackwardBlock c{kernel, cs, spec.mask, fc.qpos, positions, fc.docs, qp, dop, lse.data(), delta.data(),
                              dq.data(), dk.data(), dv.data()};
  BackwardStats st;
  ring::RingStep* step = im.step.get();
  ring::GradientRelay* relay = nullptr;
  try {
    if (!im.gradients) im.gradients = std::make_unique<ring::GradientRelay>(*im.transport);
    const bool own = scope == Scope::ring;
    step = own ? im.step.get() : &im.mesh_of().step(scope, static_cast<std::uint32_t>(im.options.limits.max_rows));
    relay = own ? im.gradients.get() : &im.mesh_of().relay(scope);
    const std::uint64_t call = ++im.calls;
    // fp32 K and V go out from the caller's arrays (no copy), unless a fault hook wants to
    // change the block's bytes.
    step->begin(cs, call, fc.qpos, k.data(), v.data(), /*borrow=*/!(own && im.hook), fc.docs);
    ring::rotate_and_accumulate(*step, *relay, call, own ? im.observer : std::function<void(int)>(),
                                own ? im.hook : RingInternals::StepHook(), c, im.backward.acc_k, im.backward.acc_v, st);
  } catch (...) {
    ring::fail_call(im);
  }
  st.bytes_sent = step->payload_bytes_sent() + relay->payload_bytes_sent();
  st.seconds = since(start);
  return st;
}

}  // namespace

namespace ring {

BackwardStats backward_ring(Ring::Impl& im, const AttentionCall& c, const Gradients& g) {
  return backward_call(im, c.scope, c.spec, c.q, c.k, c.v, c.positions, documents_of(c), g.o, g.lse, g.d_o, g.dq, g.dk,
                       g.dv);
}

}  // namespace ring

}  // namespace ringattn
