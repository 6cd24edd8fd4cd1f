// Ring::forward_ulysses (include/ringattn/ring.hpp): Ulysses' schedule, its steps in
// ring/ulysses.hpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "ring/schedules.hpp"
#include "ring/block_format.hpp"
#include "ring/call_checks.hpp"
#include "ring/internals.hpp"
#include "ring/ring_impl.hpp"
#include "ring/ulysses.hpp"
#include "ringattn/byte_order.hpp"
#include "ringattn/error.hpp"
#include "ringattn/ring.hpp"

namespace ringattn {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using ring::Field;
using ring::Plan;
using ring::to_heads;
using ring::to_rows;

std::string who(const Ring& ring, const char* call) { return "rank " + std::to_string(ring.rank()) + ": " + call + ": "; }

template <class Stats>
Stats finish(Stats st, const collectives::ExchangeStats& moved, Clock::time_point start) {
  st.bytes_sent = moved.bytes_sent;
  st.wait_seconds = moved.wait_seconds;
  st.seconds = since(start);
  return st;
}

ring::UlyssesState& state_of(Ring& ring, Ring::Impl& im) {
  if (!im.ulysses) im.ulysses = std::make_unique<ring::UlyssesState>(*im.transport, RingInternals::max_frame_bytes(ring));
  return *im.ulysses;
}


using Documents = std::optional<std::span<const std::int32_t>>;

ForwardStats ulysses_forward(Ring& ring, Ring::Impl& im, const AttentionSpec& spec, std::span<const float> q,
                             std::span<const float> k, std::span<const float> v, std::span<const std::int64_t> positions,
                             const Documents& documents, std::span<float> o, std::span<float> lse) {
  const auto start = Clock::now();
  im.check_usable();
  const ring::CheckedCall fc = ring::check_call(im, "forward (ulysses)", spec, q, k, v, positions, documents, o, lse);
  const float scale = fc.kernel.config().scale;  // resolved: every rank compares it
  ring::UlyssesState& u = state_of(ring, im);
  collectives::ExchangeStats moved;
  ForwardStats st;
  try {
    const Plan p = ring::plan_call(u, who(ring, "forward (ulysses)"), im.options.limits.max_rows, moved,
                                   ring::call_spec(spec, scale, documents.has_value()), positions, fc.docs);
    const std::int64_t D = spec.head_dim;
    const Field in[] = {{q.data(), spec.heads, D, false, spec.dtype},
                        {k.data(), spec.kv_heads, D, true, spec.dtype},
                        {v.data(), spec.kv_heads, D, true, spec.dtype}};
    std::vector<std::byte>* const seq[] = {&u.q, &u.k, &u.v};
    to_heads(u, p, in, seq, moved);

    BlockAttention& kernel = im.kernel_for(p.local(spec, scale));  // step 4
    const Positions all = Positions::from_sorted(u.all_positions.data(), p.N);
    u.state.reset(p.N, p.h, D);
    const auto t0 = Clock::now();
    {
      const ring::BusyKernel busy(*im.transport, kernel);
      st.useful_flops +=
          kernel.fold(u.q.data(), all, u.all_documents, u.k.data(), u.v.data(), all, u.all_documents, u.state).useful_flops;
    }
    u.o.resize(static_cast<std::size_t>(p.N * p.h * D));
    u.lse.resize(static_cast<std::size_t>(p.N * p.h));
    finalize(u.state, u.o.data(), u.lse.data());
    st.compute_seconds += since(t0);
    st.steps = 1;

    std::vector<Field> back = {{u.o.data(), spec.heads, D, false, DType::f32}};  // step 5
    std::vector<float*> to = {o.data()};
    if (!lse.empty()) {
      back.push_back({u.lse.data(), spec.heads, 1, false, DType::f32});
      to.push_back(lse.data());
    }
    to_rows(u, p, back, to, moved);
  } catch (...) {
    ring::fail_call(im);  // a refusal found alike on every rank (InvalidArgument) leaves the ring usable
  }
  return finish(st, moved, start);
}

BackwardStats ulysses_backward(Ring& ring, Ring::Impl& im, const AttentionSpec& spec, std::span<const float> q,
                               std::span<const float> k, std::span<const float> v, std::span<const std::int64_t> positions,
                               const Documents& documents, std::span<const float> o, std::span<const float> lse,
                               std::span<const float> d_o, std::span<float> dq, std::span<float> dk, std::span<float> dv) {
  const auto start = Clock::now();
  im.check_usable();
  const ring::CheckedCall fc = ring::check_call(im, "backward (ulysses)", spec, q, k, v, positions, documents, o, lse);
  const auto rows = static_cast<std::int64_t>(positions.size());
  ring::check_backward_inputs(who(ring, "backward (ulysses)"), spec, rows, q, k, v, o, lse, d_o, dq, dk, dv);
  const float scale = fc.kernel.config().scale;
  const std::int64_t H = spec.heads, D = spec.head_dim;
  ring::UlyssesState& u = state_of(ring, im);
  u.delta.resize(static_cast<std::size_t>(rows * H));  // D_i = dO_i . O_i, per row and head, on the rows' rank
  attention_backward_delta(o.data(), d_o.data(), rows, H, D, u.delta.data(), im.options.threads);
  collectives::ExchangeStats moved;
  BackwardStats st;
  try {
    ring::CallSpec cs = ring::call_spec(spec, scale, documents.has_value());
    cs.backward = true;  // a rank in forward_ulysses() meanwhile is refused by every rank alike
    const Plan p =
        ring::plan_call(u, who(ring, "backward (ulysses)"), im.options.limits.max_rows, moved, cs, positions, fc.docs);
    const Field in[] = {{q.data(), H, D, false, spec.dtype},          {k.data(), spec.kv_heads, D, true, spec.dtype},
                        {v.data(), spec.kv_heads, D, true, spec.dtype}, {d_o.data(), H, D, false, spec.dtype},
                        {lse.data(), H, 1, false, DType::f32},          {u.delta.data(), H, 1, false, DType::f32}};
    std::vector<std::byte>* const seq[] = {&u.q, &u.k, &u.v, &u.d_o, &u.lse_seq, &u.delta_seq};
    to_heads(u, p, in, seq, moved);

    BlockAttentionBackward& kernel = im.backward_kernel_for(p.local(spec, scale));
    const Positions all = Positions::from_sorted(u.all_positions.data(), p.N);
    u.dq.assign(static_cast<std::size_t>(p.N * p.h * D), 0.0f);
    u.dk.assign(static_cast<std::size_t>(p.N * p.hk * D), 0.0f);
    u.dv.assign(u.dk.size(), 0.0f);
    const auto t0 = Clock::now();
    {
      const ring::BusyKernel busy(*im.transport, kernel);
      st.useful_flops += kernel
                             .accumulate(u.q.data(), all, u.all_documents, u.k.data(), u.v.data(), all,
                                         u.all_documents, u.d_o.data(),
                                         reinterpret_cast<const float*>(u.lse_seq.data()),
                                         reinterpret_cast<const float*>(u.delta_seq.data()), u.dq.data(), u.dk.data(),
                                         u.dv.data())
                             .useful_flops;
    }
    st.compute_seconds += since(t0);
    st.steps = 1;
    const Field back[] = {{u.dq.data(), H, D, false, DType::f32},
                          {u.dk.data(), spec.kv_heads, D, true, DType::f32},
                          {u.dv.data(), spec.kv_heads, D, true, DType::f32}};
    float* const to[] = {dq.data(), dk.data(), dv.data()};
    to_rows(u, p, back, to, moved);
  } catch (...) {
    ring::fail_call(im);  // a refusal found alike on every rank (InvalidArgument) leaves the ring usable
  }
  return finish(st, moved, start);
}

}  // namespace

namespace ring {

ForwardStats forward_ulysses(Ring& ring, Ring::Impl& im, const AttentionCall& c, std::span<float> o, std::span<float> lse) {
  return ulysses_forward(ring, im, c.spec, c.q, c.k, c.v, c.positions, documents_of(c), o, lse);
}

BackwardStats backward_ulysses(Ring& ring, Ring::Impl& im, const AttentionCall& c, const Gradients& g) {
  return ulysses_backward(ring, im, c.spec, c.q, c.k, c.v, c.positions, documents_of(c), g.o, g.lse, g.d_o, g.dq, g.dk, g.dv);
}

}  // namespace ring

}  // namespace ringattn
