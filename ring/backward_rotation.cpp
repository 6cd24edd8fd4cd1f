#include "ring/backward_rotation.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/internals.hpp"
#include "ring/call_checks.hpp"
#include "ring/rotation.hpp"

namespace ringattn::ring {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

void rotate_and_accumulate(RingStep& step, GradientRelay& grads, std::uint64_t call, const std::function<void(int)>& observer,
                           const RingInternals::StepHook& hook, const BackwardBlock& c, std::vector<float>& acc_k,
                           std::vector<float>& acc_v, BackwardStats& st) {
  net::Transport& t = step.transport();
  const BusyKernel busy(t, c.kernel);
  const int P = t.world();
  const std::int64_t cols = c.cs.kv_heads * c.cs.head_dim;
  const std::size_t own_n = c.positions.size() * static_cast<std::size_t>(cols);
  const RotationStats rs = rotate(step, observer, hook, [&](int s, const RingStep::View& blk) {
    const auto n = static_cast<std::size_t>(blk.rows * cols);
    // This step's share of the block's dK, dV goes into dk and dv themselves when the
    // block fits (no more rows than this rank's): they are free until this rank's own
    // accumulators come home, and a pooled pair would cost one more block of memory.
    // Only a larger block (uneven shards) takes the pooled pair.
    float* ak = c.dk;
    float* av = c.dv;
    if (n > own_n) {
      if (acc_k.size() < n) {
        acc_k.resize(n);
        acc_v.resize(n);
      }
      ak = acc_k.data();
      av = acc_v.data();
    }
    std::fill(ak, ak + n, 0.0f);
    std::fill(av, av + n, 0.0f);
    bool computed = false;
    if (step_hidden(c.mask, c.positions, c.docs, blk)) {
      ++st.steps_skipped;
    } else {
      const auto t0 = Clock::now();
      const GradientStats gs = KernelInternals::accumulate_checked(c.kernel, c.q, c.qpos, c.docs, blk.k, blk.v,
                                                                   *blk.positions, blk.documents, c.d_o, c.lse,
                                                                   c.delta, c.dq, ak, av);
      st.compute_seconds += since(t0);
      st.useful_flops += gs.useful_flops;
      computed = gs.tiles_computed > 0;
      if (!computed) ++st.steps_skipped;
    }
    if (P == 1) return;  // the own block's share is all of dK, dV, already in dk, dv
    if (s == 0) {
      grads.start(c.cs, call, blk, ak, av);
    } else {
      const auto t1 = Clock::now();
      const GradientRelay::Grads g = grads.arrived(s, blk);
      st.wait_seconds += since(t1);
      if (computed)
        for (std::size_t i = 0; i < n; ++i) {
          g.dk[i] += ak[i];
          g.dv[i] += av[i];
        }
      grads.relay(s);
    }
  });
  st.steps += rs.steps;
  st.wait_seconds += rs.wait_seconds;
  if (P == 1) return;
  // This rank's own block, its accumulators back after every rank's share.
  const RingStep::View own{t.rank(), static_cast<std::int64_t>(c.positions.size()), &c.qpos, c.docs, nullptr, nullptr};
  const auto t1 = Clock::now();
  const GradientRelay::Grads g = grads.arrived(P, own);
  st.wait_seconds += since(t1);
  std::memcpy(c.dk, g.dk, own_n * sizeof(float));
  std::memcpy(c.dv, g.dv, own_n * sizeof(float));
}

}  // namespace ringattn::ring
