// Ring::forward_hybrid (include/ringattn/ring.hpp): Ulysses in each group, the ring across
// the groups; the schedule in ring/hybrid.hpp.
#include "ring/schedules.hpp"
#include "ring/hybrid.hpp"

#include <chrono>
#include <string>

#include "ring/backward_rotation.hpp"
#include "ring/call_checks.hpp"
#include "ring/internals.hpp"
#include "ring/ring_impl.hpp"
#include "ring/rotation.hpp"
#include "ringattn/error.hpp"
#include "ringattn/ring.hpp"

namespace ringattn {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

ring::HybridState& state_of(Ring& ring, Ring::Impl& im) {
  if (!im.hybrid)
    im.hybrid = std::make_unique<ring::HybridState>(im.mesh_of(), RingInternals::max_frame_bytes(ring),
                                                    RingInternals::max_block_rows(ring));
  return *im.hybrid;
}

using Documents = std::optional<std::span<const std::int32_t>>;

// A block across the groups holds a whole group's rows: refused alike on every rank of the
// group, before any K/V moves.
void check_group_rows(const Ring::Impl& im, const std::string& who, const ring::Plan& p) {
  if (p.N > im.options.limits.max_rows)
    throw InvalidArgument(who + "the group's " + std::to_string(p.N) + " rows exceed limits().max_rows = " +
                          std::to_string(im.options.limits.max_rows) +
                          " (a block across the groups holds a whole group's rows)");
}

ForwardStats hybrid_forward(Ring& ring, Ring::Impl& im, const AttentionSpec& spec, std::span<const float> q,
                            std::span<const float> k, std::span<const float> v, std::span<const std::int64_t> positions,
                            const Documents& documents, std::span<float> o, std::span<float> lse) {
  const auto start = Clock::now();
  im.check_usable();
  const std::string who = "rank " + std::to_string(ring.rank()) + ": forward (hybrid): ";
  const ring::CheckedCall fc = ring::check_call(im, "forward (hybrid)", spec, q, k, v, positions, documents, o, lse);
  const float scale = fc.kernel.config().scale;  // resolved: every rank compares it
  ring::HybridState& hs = state_of(ring, im);
  ring::UlyssesState& u = hs.u;
  collectives::ExchangeStats moved;
  ForwardStats st;
  try {
    const bool docs = documents.has_value();
    const ring::Plan p = ring::plan_call(u, who, im.options.limits.max_rows, moved, ring::call_spec(spec, scale, docs),
                                         positions, fc.docs);
    check_group_rows(im, who, p);
    const std::int64_t D = spec.head_dim;
    const ring::Field in[] = {{q.data(), spec.heads, D, false, spec.dtype},
                              {k.data(), spec.kv_heads, D, true, spec.dtype},
                              {v.data(), spec.kv_heads, D, true, spec.dtype}};
    std::vector<std::byte>* const seq[] = {&u.q, &u.k, &u.v};
    ring::to_heads(u, p, in, seq, moved);

    const AttentionSpec local = p.local(spec, scale);  // step 4: the ring across the groups
    BlockAttention& kernel = im.kernel_for(local);
    const Positions all = Positions::from_sorted(u.all_positions.data(), p.N);
    u.state.reset(p.N, p.h, D);
    hs.step.begin_raw(ring::call_spec(local, scale, docs), ++im.calls, all, u.k.data(), u.v.data(), u.all_documents);
    {
      const ring::BusyKernel busy(*im.transport, kernel);
      const ring::RotationStats rs = ring::rotate(hs.step, {}, {}, [&](int, const ring::RingStep::View& blk) {
        const auto t0 = Clock::now();
        st.useful_flops +=
            kernel.fold(u.q.data(), all, u.all_documents, blk.k, blk.v, *blk.positions, blk.documents, u.state).useful_flops;
        st.compute_seconds += since(t0);
      });
      st.steps = rs.steps;
      st.wait_seconds += rs.wait_seconds;
    }
    st.bytes_sent += hs.step.payload_bytes_sent();
    u.o.resize(static_cast<std::size_t>(p.N * p.h * D));
    u.lse.resize(static_cast<std::size_t>(p.N * p.h));
    finalize(u.state, u.o.data(), u.lse.data());

    std::vector<ring::Field> back = {{u.o.data(), spec.heads, D, false, DType::f32}};  // step 5
    std::vector<float*> to = {o.data()};
    if (!lse.empty()) {
      back.push_back({u.lse.data(), spec.heads, 1, false, DType::f32});
      to.push_back(lse.data());
    }
    ring::to_rows(u, p, back, to, moved);
  } catch (...) {
    ring::fail_call(im);  // a refusal found alike on every rank (InvalidArgument) leaves the ring usable
  }
  st.bytes_sent += moved.bytes_sent;
  st.wait_seconds += moved.wait_seconds;
  st.seconds = since(start);
  return st;
}

BackwardStats hybrid_backward(Ring& ring, Ring::Impl& im, const AttentionSpec& spec, std::span<const float> q,
                              std::span<const float> k, std::span<const float> v, std::span<const std::int64_t> positions,
                              const Documents& documents, std::span<const float> o, std::span<const float> lse,
                              std::span<const float> d_o, std::span<float> dq, std::span<float> dk, std::span<float> dv) {
  const auto start = Clock::now();
  im.check_usable();
  const std::string who = "rank " + std::to_string(ring.rank()) + ": backward (hybrid): ";
  const ring::CheckedCall fc = ring::check_call(im, "backward (hybrid)", spec, q, k, v, positions, documents, o, lse);
  const auto rows = static_cast<std::int64_t>(positions.size());
  ring::check_backward_inputs(who, spec, rows, q, k, v, o, lse, d_o, dq, dk, dv);
  const float scale = fc.kernel.config().scale;
  const std::int64_t H = spec.heads, D = spec.head_dim;
  ring::HybridState& hs = state_of(ring, im);
  ring::UlyssesState& u = hs.u;
  u.delta.resize(static_cast<std::size_t>(rows * H));  // D_i = dO_i . O_i, per row and head, on the rows' rank
  attention_backward_delta(o.data(), d_o.data(), rows, H, D, u.delta.data(), im.options.threads);
  collectives::ExchangeStats moved;
  BackwardStats st;
  try {
    const bool docs = documents.has_value();
    ring::CallSpec cs = ring::call_spec(spec, scale, docs);
    cs.backward = true;  // a rank in forward_hybrid() meanwhile is refused by every rank of its group alike
    const ring::Plan p = ring::plan_call(u, who, im.options.limits.max_rows, moved, cs, positions, fc.docs);
    check_group_rows(im, who, p);
    const ring::Field in[] = {{q.data(), H, D, false, spec.dtype},          {k.data(), spec.kv_heads, D, true, spec.dtype},
                              {v.data(), spec.kv_heads, D, true, spec.dtype}, {d_o.data(), H, D, false, spec.dtype},
                              {lse.data(), H, 1, false, DType::f32},          {u.delta.data(), H, 1, false, DType::f32}};
    std::vector<std::byte>* const seq[] = {&u.q, &u.k, &u.v, &u.d_o, &u.lse_seq, &u.delta_seq};
    ring::to_heads(u, p, in, seq, moved);

    const AttentionSpec local = p.local(spec, scale);  // step 4: the backward ring across the groups
    BlockAttentionBackward& kernel = im.backward_kernel_for(local);
    const Positions all = Positions::from_sorted(u.all_positions.data(), p.N);
    u.dq.assign(static_cast<std::size_t>(p.N * p.h * D), 0.0f);
    u.dk.assign(static_cast<std::size_t>(p.N * p.hk * D), 0.0f);
    u.dv.assign(u.dk.size(), 0.0f);
    ring::CallSpec lcs = ring::call_spec(local, scale, docs);
    lcs.backward = true;
    const std::uint64_t call = ++im.calls;
    hs.step.begin_raw(lcs, call, all, u.k.data(), u.v.data(), u.all_documents);
    const ring::BackwardBlock c{kernel,
                                lcs,
                                spec.mask,
                                all,
                                u.all_positions,
                                u.all_documents,
                                u.q.data(),
                                u.d_o.data(),
                                reinterpret_cast<const float*>(u.lse_seq.data()),
                                reinterpret_cast<const float*>(u.delta_seq.data()),
                                u.dq.data(),
                                u.dk.data(),
                                u.dv.data()};
    ring::rotate_and_accumulate(hs.step, hs.grads, call, {}, {}, c, hs.acc_k, hs.acc_v, st);
    st.bytes_sent += hs.step.payload_bytes_sent() + hs.grads.payload_bytes_sent();

    const ring::Field back[] = {{u.dq.data(), H, D, false, DType::f32},  // step 5
                                {u.dk.data(), spec.kv_heads, D, true, DType::f32},
                                {u.dv.data(), spec.kv_heads, D, true, DType::f32}};
    float* const to[] = {dq.data(), dk.data(), dv.data()};
    ring::to_rows(u, p, back, to, moved);
  } catch (...) {
    ring::fail_call(im);
  }
  st.bytes_sent += moved.bytes_sent;
  st.wait_seconds += moved.wait_seconds;
  st.seconds = since(start);
  return st;
}

}  // namespace

namespace ring {

ForwardStats forward_hybrid(Ring& ring, Ring::Impl& im, const AttentionCall& c, std::span<float> o, std::span<float> lse) {
  return hybrid_forward(ring, im, c.spec, c.q, c.k, c.v, c.positions, documents_of(c), o, lse);
}

BackwardStats backward_hybrid(Ring& ring, Ring::Impl& im, const AttentionCall& c, const Gradients& g) {
  return hybrid_backward(ring, im, c.spec, c.q, c.k, c.v, c.positions, documents_of(c), g.o, g.lse, g.d_o, g.dq, g.dk, g.dv);
}

}  // namespace ring

}  // namespace ringattn
