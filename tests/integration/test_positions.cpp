// Positions are global, and every N the layouts accept is handled exactly.
//
// Why a dedicated test for global positions: a node that evaluated the mask on its
// local row indices (0..b-1 for its own queries, 0..b_j-1 for a visiting block) would
// still produce a plausible softmax — every row sums to one, nothing is NaN — and on
// a contiguous layout node 0 would even be right. So the test builds, in float64, the
// answers the ring would give with local positions (queries local, keys local, or
// both) and asserts two things for each layout and mask: that those answers differ
// from the global one by far more than the tolerance (the test can tell them apart),
// and that the ring's output matches the global one. A regression to local positions
// anywhere (coordinator shard order, node, KvRing's per-source positions, the
// kernel's mask) fails here with a large error, not a marginal one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "src/oracle/reference.hpp"
#include "ringattn/layout.hpp"
#include "tests/integration/ring_case.hpp"

namespace ringattn::itest {
namespace {

enum class Local { none, queries, keys, both };  // none: global positions, the oracle's own check

std::vector<float> gather_rows(const std::vector<float>& x, std::int64_t row_elems, const std::vector<std::int64_t>& rows) {
  std::vector<float> out;
  out.reserve(rows.size() * static_cast<std::size_t>(row_elems));
  for (auto r : rows) out.insert(out.end(), x.begin() + r * row_elems, x.begin() + (r + 1) * row_elems);
  return out;
}

// Folds a partial (o, lse) over one key block into the accumulator of the same rows.
void merge_partial(std::vector<double>& acc_o, std::vector<double>& acc_lse, const std::vector<double>& o,
                   const std::vector<double>& lse, std::size_t head_dim) {
  for (std::size_t rh = 0; rh < acc_lse.size(); ++rh) {
    if (std::isinf(lse[rh])) continue;  // the block hid every key from this row
    const bool first = std::isinf(acc_lse[rh]);
    const double m = first ? lse[rh] : std::log(std::exp(acc_lse[rh]) + std::exp(lse[rh]));
    const double wa = first ? 0.0 : std::exp(acc_lse[rh] - m), wb = std::exp(lse[rh] - m);
    for (std::size_t d = 0; d < head_dim; ++d) acc_o[rh * head_dim + d] = wa * acc_o[rh * head_dim + d] + wb * o[rh * head_dim + d];
    acc_lse[rh] = m;
  }
}

// The ring's answer if positions were local in the way `local` says: for each node i,
// fold every block j with those positions, merging the partial results by lse.
Reference local_positions_answer(const Inputs& in, Layout layout, int nodes, Mask mask, Local local) {
  const auto& s = in.shape;
  const std::int64_t hd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
  const auto hd_z = static_cast<std::size_t>(hd), h_z = static_cast<std::size_t>(s.heads);
  const bool q_local = local == Local::queries || local == Local::both;
  const bool k_local = local == Local::keys || local == Local::both;
  Reference out;
  out.o.assign(in.q.size(), 0.0);
  out.lse.assign(static_cast<std::size_t>(s.tokens) * h_z, -INFINITY);
  for (int i = 0; i < nodes; ++i) {
    const Positions qg = shard_positions(layout, s.tokens, nodes, i);
    const auto qrows = qg.materialize();
    const auto q = gather_rows(in.q, hd, qrows);
    const Positions qp = q_local ? Positions::contiguous(0, qg.size()) : qg;
    std::vector<double> acc_o(qrows.size() * hd_z, 0.0), acc_lse(qrows.size() * h_z, -INFINITY);
    for (int j = 0; j < nodes; ++j) {
      const Positions kg = shard_positions(layout, s.tokens, nodes, j);
      const auto krows = kg.materialize();
      const auto k = gather_rows(in.k, kvd, krows), v = gather_rows(in.v, kvd, krows);
      const Positions kp = k_local ? Positions::contiguous(0, kg.size()) : kg;
      std::vector<double> o(acc_o.size()), lse(acc_lse.size());
      oracle::dense_attention_f64({s.heads, s.kv_heads, s.head_dim, mask, 0.0}, q.data(), qp, k.data(), v.data(), kp,
                                   o.data(), lse.data());
      merge_partial(acc_o, acc_lse, o, lse, static_cast<std::size_t>(s.head_dim));
    }
    for (std::size_t r = 0; r < qrows.size(); ++r) {  // scatter the shard's rows to their global rows
      const auto g = static_cast<std::size_t>(qrows[r]);
      std::copy_n(acc_o.data() + r * hd_z, hd_z, out.o.data() + g * hd_z);
      std::copy_n(acc_lse.data() + r * h_z, h_z, out.lse.data() + g * h_z);
    }
  }
  return out;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && std::isinf(b[i])) continue;
    e = std::max(e, std::isinf(a[i]) || std::isinf(b[i]) ? INFINITY : std::fabs(a[i] - b[i]));
  }
  return e;
}

const char* name(Local l) {
  switch (l) {
    case Local::none: return "none";
    case Local::queries: return "queries";
    case Local::keys: return "keys";
    case Local::both: return "both";
  }
  return "?";
}

}  // namespace

TEST_CASE("positions: the ring masks on global positions, and local ones would be caught") {
  const Shape shape{203, 4, 2, 64};
  const int nodes = 3;
  ScratchDir dir;
  const Inputs in(shape, 23, DType::f32);
  in.write(dir);
  for (const Mask mask : {Mask::causal(), Mask::sliding_window(29)}) {
    const Reference global = dense_reference(in, mask);
    for (const auto layout : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
      Job job;
      job.nodes = nodes;
      job.layout = std::string(to_string(layout));
      job.mask = mask;
      INFO(describe(job, shape));
      // The oracle itself is sound: with global positions its merge reproduces dense.
      CHECK(max_diff(local_positions_answer(in, layout, nodes, mask, Local::none).o, global.o) < 1e-9);
      // The local-position answers really are different: the test is sensitive.
      for (const Local local : {Local::queries, Local::keys, Local::both}) {
        INFO("local positions for " << name(local));
        CHECK(max_diff(local_positions_answer(in, layout, nodes, mask, local).o, global.o) > 0.05);
      }
      const RingOutput r = run_job(dir, job);
      INFO(r.outcome.err);
      REQUIRE(r.outcome.exit_code == 0);
      CHECK(max_abs_error(r.o, global.o) <= 2e-5);
      CHECK(max_abs_error(r.lse, global.lse) <= 2e-5);
    }
  }
}

TEST_CASE("shards: every N from the smallest each layout accepts upwards is exact") {
  // Uneven shards at their most uneven: N = P (contiguous/striped) and N = 2P (zigzag)
  // give one-row shards or chunks; N + 1 and 2N - 1 leave a remainder of 1 and P - 1.
  const int nodes = 4;
  for (const auto layout : {Layout::contiguous, Layout::striped, Layout::zigzag}) {
    const std::int64_t least = layout == Layout::zigzag ? 2 * nodes : nodes;
    for (const std::int64_t n : {least, least + 1, 2 * least - 1}) {
      const Shape shape{n, 2, 1, 32};
      ScratchDir dir;
      const Inputs in(shape, 5, DType::f32);
      in.write(dir);
      for (const Mask mask : {Mask::none(), Mask::causal()}) {
        Job job;
        job.nodes = nodes;
        job.layout = std::string(to_string(layout));
        job.mask = mask;
        const Reference ref = dense_reference(in, mask);
        const RingOutput r = run_job(dir, job);
        INFO(describe(job, shape));
        INFO(r.outcome.err);
        REQUIRE(r.outcome.exit_code == 0);
        CHECK(max_abs_error(r.o, ref.o) <= 2e-5);
        CHECK(max_abs_error(r.lse, ref.lse) <= 2e-5);
      }
    }
  }
}

TEST_CASE("shards: fewer tokens than the layout needs is refused, naming layout and counts") {
  const int nodes = 4;
  for (const auto layout : {Layout::contiguous, Layout::striped, Layout::zigzag}) {
    const std::int64_t least = layout == Layout::zigzag ? 2 * nodes : nodes;
    const Shape shape{least - 1, 2, 1, 32};
    ScratchDir dir;
    Inputs(shape, 5, DType::f32).write(dir);
    Job job;
    job.nodes = nodes;
    job.layout = std::string(to_string(layout));
    const RingOutput r = run_job(dir, job);
    INFO(describe(job, shape));
    INFO(r.outcome.err);
    CHECK(r.outcome.exit_code != 0);
    CHECK(r.outcome.group_empty);
    const auto lines = r.outcome.error_lines();
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find(job.layout) != std::string::npos);
    CHECK(lines[0].find(std::to_string(nodes) + " nodes") != std::string::npos);
    CHECK(lines[0].find(std::to_string(least) + " tokens") != std::string::npos);
    CHECK(lines[0].find("got " + std::to_string(least - 1)) != std::string::npos);
    CHECK(dir.entries() == std::vector<std::string>{"k.npy", "q.npy", "v.npy"});
  }
}

}  // namespace ringattn::itest
