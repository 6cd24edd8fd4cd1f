// Ring::backward (include/ringattn/ring.hpp): the backward ring, forward's rotation
// (ring/rotation.hpp: K/V blocks on the ring step) with its own step's work, and the
// gradient relay (each block's dK/dV accumulators one hop behind it, ring/gradient_relay.hpp):
//
//   D = rowsum(dO ∘ O) once; dQ = 0
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
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "kernels/internals.hpp"
#include "ring/call_checks.hpp"
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

struct BackwardCall {
  const ring::CheckedCall& fc;
  BlockAttentionBackward& kernel;
  ring::CallSpec cs;
  const void* q;    // in spec.dtype
  const void* d_o;  // in spec.dtype
  const float* lse;
  const float* delta;
  float *dq, *dk, *dv;
};

// The rotation (rotation.hpp) with the gradient relay one hop behind it; dq accumulates in
// place, dk and dv serve as the step's accumulators and hold the result at the end.
void rotate_and_accumulate(Ring::Impl& im, const AttentionSpec& spec, const BackwardCall& c,
                           std::span<const std::int64_t> positions, const float* k, const float* v, BackwardStats& st) {
  net::Transport& t = *im.transport;
  if (!im.gradients) im.gradients = std::make_unique<ring::GradientRelay>(t);
  ring::GradientRelay& grads = *im.gradients;
  const std::uint64_t call = ++im.calls;
  im.step->begin(c.cs, call, c.fc.qpos, k, v, /*borrow=*/!im.hook, c.fc.docs);
  const ring::BusyKernel busy(t, c.kernel);
  const int P = im.options.world_size;
  const std::int64_t cols = spec.kv_heads * spec.head_dim;
  const std::size_t own_n = positions.size() * static_cast<std::size_t>(cols);
  const ring::RotationStats rs = ring::rotate(im, [&](int s, const ring::RingStep::View& blk) {
    const auto n = static_cast<std::size_t>(blk.rows * cols);
    // This step's share of the block's dK, dV goes into dk and dv themselves when the
    // block fits (no more rows than this rank's): they are free until this rank's own
    // accumulators come home, and a pooled pair would cost one more block of memory.
    // Only a larger block (uneven shards) takes the pooled pair.
    float* acc_k = c.dk;
    float* acc_v = c.dv;
    if (n > own_n) {
      auto& pk = im.backward.acc_k;
      auto& pv = im.backward.acc_v;
      if (pk.size() < n) {
        pk.resize(n);
        pv.resize(n);
      }
      acc_k = pk.data();
      acc_v = pv.data();
    }
    std::fill(acc_k, acc_k + n, 0.0f);
    std::fill(acc_v, acc_v + n, 0.0f);
    bool computed = false;
    if (ring::step_hidden(spec.mask, positions, c.fc.docs, blk)) {
      ++st.steps_skipped;
    } else {
      const auto t0 = Clock::now();
      const GradientStats gs =
          KernelInternals::accumulate_checked(c.kernel, c.q, c.fc.qpos, c.fc.docs, blk.k, blk.v, *blk.positions,
                                              blk.documents, c.d_o, c.lse, c.delta, c.dq, acc_k, acc_v);
      st.compute_seconds += since(t0);
      st.useful_flops += gs.useful_flops;
      computed = gs.tiles_computed > 0;
      if (!computed) ++st.steps_skipped;
    }
    if (P == 1) return;  // the own block's share is all of dK, dV, already in dk, dv
    if (s == 0) {
      grads.start(c.cs, call, blk, acc_k, acc_v);
    } else {
      const auto t1 = Clock::now();
      const ring::GradientRelay::Grads g = grads.arrived(s, blk);
      st.wait_seconds += since(t1);
      if (computed)
        for (std::size_t i = 0; i < n; ++i) {
          g.dk[i] += acc_k[i];
          g.dv[i] += acc_v[i];
        }
      grads.relay(s);
    }
  });
  st.steps += rs.steps;
  st.wait_seconds += rs.wait_seconds;
  if (P == 1) return;
  // This rank's own block, its accumulators back after every rank's share.
  const ring::RingStep::View own{t.rank(), static_cast<std::int64_t>(positions.size()), &c.fc.qpos, c.fc.docs, nullptr,
                                 nullptr};
  const auto t1 = Clock::now();
  const ring::GradientRelay::Grads g = grads.arrived(P, own);
  st.wait_seconds += since(t1);
  std::memcpy(c.dk, g.dk, own_n * sizeof(float));
  std::memcpy(c.dv, g.dv, own_n * sizeof(float));
}

// Both backward()s: `documents` unset for a call without them.
BackwardStats backward_call(Ring::Impl& im, const AttentionSpec& spec, std::span<const float> q,
                            std::span<const float> k, std::span<const float> v,
                            std::span<const std::int64_t> positions,
                            std::optional<std::span<const std::int32_t>> documents, std::span<const float> o,
                            std::span<const float> lse, std::span<const float> d_o, std::span<float> dq,
                            std::span<float> dk, std::span<float> dv) {
  const auto start = Clock::now();
  im.check_usable();
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
  const BackwardCall c{fc, kernel, cs, qp, dop, lse.data(), delta.data(), dq.data(), dk.data(), dv.data()};
  BackwardStats st;
  try {
    rotate_and_accumulate(im, spec, c, positions, k.data(), v.data(), st);
  } catch (...) {
    ring::fail_call(im);
  }
  st.bytes_sent = im.step->payload_bytes_sent() + (im.gradients ? im.gradients->payload_bytes_sent() : 0);
  st.seconds = since(start);
  return st;
}

}  // namespace

BackwardStats Ring::backward(const AttentionSpec& spec, std::span<const float> q, std::span<const float> k,
                             std::span<const float> v, std::span<const std::int64_t> positions,
                             std::span<const float> o, std::span<const float> lse, std::span<const float> d_o,
                             std::span<float> dq, std::span<float> dk, std::span<float> dv) {
  return backward_call(*impl_, spec, q, k, v, positions, std::nullopt, o, lse, d_o, dq, dk, dv);
}

BackwardStats Ring::backward(const AttentionSpec& spec, std::span<const float> q, std::span<const float> k,
                             std::span<const float> v, std::span<const std::int64_t> positions,
                             std::span<const std::int32_t> documents, std::span<const float> o,
                             std::span<const float> lse, std::span<const float> d_o, std::span<float> dq,
                             std::span<float> dk, std::span<float> dv) {
  return backward_call(*impl_, spec, q, k, v, positions, documents, o, lse, d_o, dq, dk, dv);
}

}  // namespace ringattn
