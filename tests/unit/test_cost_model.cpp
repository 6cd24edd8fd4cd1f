// The planner reproduces every number of the seed (DESIGN.md, "Numbers from the seed
// to reproduce"), within the rounding the seed itself uses.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>

#include "ringattn/error.hpp"
#include "src/plan/cost_model.hpp"
#include "src/plan/plan_report.hpp"

using namespace ringattn::plan;

namespace {

constexpr std::int64_t kMillion = 1048576;  // the seed's "1M" tokens

// Steps a schedule's kernel takes: the groups across (1 for Ulysses).
double dbl_steps(const ScheduleCost& c, std::int64_t nodes) { return static_cast<double>(nodes / c.group); }

// The seed's reference deployment: d = 4096 (32 x 128), 32 layers, bf16, N = 1M, P = 64.
PlanInput seed_input(std::int64_t kv_heads, double bandwidth) {
  PlanInput in;
  in.heads = 32;
  in.head_dim = 128;
  in.kv_heads = kv_heads;
  in.layers = 32;
  in.seq = kMillion;
  in.nodes = 64;
  in.dtype_bytes = 2;
  in.flops = 400e12;
  in.bandwidth = bandwidth;
  return in;
}

}  // namespace

TEST_SUITE("cost model") {
  TEST_CASE("memory bill: 17 GB per layer, over 500 GB for 32 layers, 135 GB with GQA") {
    CHECK(kv_bytes_per_layer(kMillion, 4096, 2) == doctest::Approx(17.2e9).epsilon(0.01));
    const Plan mha = make_plan(seed_input(32, 50e9));
    CHECK(mha.kv_bytes_per_layer == doctest::Approx(17e9).epsilon(0.02));
    CHECK(mha.kv_bytes_all_layers > 500e9);
    CHECK(mha.kv_bytes_all_layers == doctest::Approx(550e9).epsilon(0.01));
    const Plan gqa = make_plan(seed_input(8, 50e9));
    // 549.8 GB / 4 = 137.4 GB; the seed rounds to "roughly 135 GB".
    CHECK(gqa.kv_bytes_all_layers == doctest::Approx(135e9).epsilon(0.02));
    CHECK(gqa.kv_bytes_all_layers == doctest::Approx(mha.kv_bytes_all_layers / 4));
    CHECK(gqa.kv_bytes_per_layer_mha == mha.kv_bytes_per_layer);
  }

  TEST_CASE("one step at N = 1M, P = 64: 4.4e12 FLOP, 11 ms; 268 MB, 0.30 ms / 5.4 ms; GQA 67 MB, 1.3 ms") {
    CHECK(step_flops(16384, 4096) == doctest::Approx(4.4e12).epsilon(0.005));
    const Plan nvlink = make_plan(seed_input(32, 900e9));
    CHECK(nvlink.block == 16384);
    CHECK(nvlink.full.flops == doctest::Approx(4.4e12).epsilon(0.005));
    CHECK(nvlink.full.compute_seconds == doctest::Approx(11e-3).epsilon(0.005));
    CHECK(nvlink.full.bytes == doctest::Approx(268e6).epsilon(0.002));
    CHECK(nvlink.full.transfer_seconds == doctest::Approx(0.30e-3).epsilon(0.01));
    CHECK(nvlink.full.margin == doctest::Approx(37).epsilon(0.01));  // "hidden, 37x margin"
    CHECK(nvlink.full.verdict == Verdict::hidden);

    const Plan ib = make_plan(seed_input(32, 50e9));
    CHECK(ib.full.transfer_seconds == doctest::Approx(5.4e-3).epsilon(0.01));
    CHECK(ib.full.margin == doctest::Approx(2).epsilon(0.03));  // "marginal, 2x"
    // The seed calls 2x marginal because a causal mask halves it: zigzag causal is ~1x.
    CHECK(ib.causal.margin == doctest::Approx(1).epsilon(0.03));
    CHECK(ib.causal.verdict == Verdict::marginal);

    const Plan gqa = make_plan(seed_input(8, 50e9));
    CHECK(gqa.full.bytes == doctest::Approx(67e6).epsilon(0.005));
    CHECK(gqa.full.transfer_seconds == doctest::Approx(1.3e-3).epsilon(0.04));
    CHECK(gqa.full.margin == doctest::Approx(8).epsilon(0.03));  // "hidden, 8x"
    CHECK(gqa.full.verdict == Verdict::hidden);
  }

  TEST_CASE("verdict thresholds") {
    CHECK(classify_margin(37) == Verdict::hidden);
    CHECK(classify_margin(1.5) == Verdict::hidden);
    CHECK(classify_margin(1.49) == Verdict::marginal);
    CHECK(classify_margin(1.0) == Verdict::marginal);
    CHECK(classify_margin(0.99) == Verdict::stalls);
    CHECK(to_string(Verdict::stalls) == "stalls");
  }

  TEST_CASE("causal balance: contiguous (P+1)/2P, zigzag 2P+1 units on every node") {
    CHECK(causal_contiguous_utilisation(1) == 1.0);
    CHECK(causal_contiguous_utilisation(4) == doctest::Approx(5.0 / 8));
    CHECK(causal_contiguous_utilisation(64) == doctest::Approx(65.0 / 128));
    CHECK(causal_contiguous_utilisation(1 << 20) == doctest::Approx(0.5).epsilon(1e-5));
    // Brute force: chunk c of 2P carries c + 1 units; node i holds chunks i and 2P-1-i.
    for (std::int64_t p : {1, 2, 3, 4, 8, 64}) {
      for (std::int64_t i = 0; i < p; ++i) CHECK((i + 1) + (2 * p - 1 - i + 1) == zigzag_units_per_node(p));
      // Contiguous by brute force: node i does i + 1 block pairs, busiest P.
      double useful = 0;
      for (std::int64_t i = 0; i < p; ++i) useful += static_cast<double>(i + 1);
      CHECK(useful / static_cast<double>(p * p) == doctest::Approx(causal_contiguous_utilisation(p)));
    }
    CHECK(zigzag_units_per_node(64) == 129);
  }

  TEST_CASE("ring vs Ulysses traffic: a factor of about P/2") {
    CHECK(ring_traffic_elements(kMillion, 16384, 4096) == 2.0 * 4096 * (kMillion - 16384));
    for (std::int64_t p : {2, 8, 64}) {
      const std::int64_t b = kMillion / p;
      const double ratio = ring_traffic_elements(kMillion, b, 4096) / ulysses_traffic_elements(b, 4096, 4096, p);
      CHECK(ratio == doctest::Approx(p / 2.0));
      // The seed's rough "4·b·d" for Ulysses gives (P-1)/2, also "about P/2".
      CHECK(ring_traffic_elements(kMillion, b, 4096) / (4.0 * b * 4096) == doctest::Approx((p - 1) / 2.0));
    }
    const Plan plan = make_plan(seed_input(32, 50e9));
    CHECK(plan.ring_over_ulysses == doctest::Approx(32));
    CHECK_FALSE(plan.ulysses_possible);  // P = 64 > 32 heads
  }

  TEST_CASE("schedules: the ring, each hybrid and Ulysses, priced from the same F and B") {
    // 8 heads of 128, 2 K/V heads, fp32, N = 64K on P = 8 nodes: b = 8192.
    PlanInput in;
    in.heads = 8;
    in.head_dim = 128;
    in.kv_heads = 2;
    in.seq = 65536;
    in.nodes = 8;
    in.dtype_bytes = 4;
    in.flops = 100e9;
    in.bandwidth = 1e9;
    const Plan p = make_plan(in);
    REQUIRE(p.schedules.size() == 4);  // groups of 1, 2, 4, 8
    const double b = 8192, D = 128;
    const ScheduleCost& ring = p.schedules[0];
    CHECK(ring.group == 1);
    CHECK(ring.all_to_all_bytes == 0);
    CHECK(ring.step_compute_seconds == doctest::Approx(4 * b * b * 8 * D / 100e9));  // the ring's own step
    CHECK(ring.step_transfer_seconds == doctest::Approx(2 * b * 2 * D * 4 / 1e9));
    CHECK(ring.seconds == doctest::Approx(p.ring_seconds_per_layer));
    // Groups of 2: 4 heads a rank over 1 K/V head; blocks of 2b rows across 4 groups.
    const ScheduleCost& h2 = p.schedules[1];
    CHECK(h2.group == 2);
    CHECK(h2.all_to_all_bytes == doctest::Approx(1 * (b * (4 * D + 2 * D) * 4 + b * (4 * D + 4) * 4)));
    CHECK(h2.step_compute_seconds == doctest::Approx(4 * (2 * b) * (2 * b) * 4 * D / 100e9));
    CHECK(h2.step_transfer_seconds == doctest::Approx(2 * (2 * b) * 1 * D * 4 / 1e9));
    CHECK(h2.ring_seconds == doctest::Approx(4 * std::max(h2.step_compute_seconds, h2.step_transfer_seconds)));
    // Groups of 8 = Ulysses: one head a rank, its K/V head replicated (8 > 2 K/V heads): no ring across.
    const ScheduleCost& u = p.schedules[3];
    CHECK(u.group == 8);
    CHECK(u.possible);
    CHECK(u.ring_bytes == 0);
    CHECK(u.all_to_all_bytes == doctest::Approx(7 * (b * (1 * D + 2 * D) * 4 + b * (1 * D + 1) * 4)));
    // The same total compute on every schedule: 4 N^2 d / P / F.
    for (const ScheduleCost& c : p.schedules)
      CHECK(dbl_steps(c, in.nodes) * c.step_compute_seconds == doctest::Approx(4.0 * 65536 * 65536 * 8 * D / 8 / 100e9));
    // On this slow link the transfers dominate: the fewer bytes, the faster.
    std::int64_t best = 0;
    double t = 1e300;
    for (const ScheduleCost& c : p.schedules)
      if (c.seconds < t) t = c.seconds, best = c.group;
    CHECK(p.best_group == best);
    // A fast link inside the groups moves the pick towards Ulysses' all-to-alls.
    in.group_bandwidth = 100e9;
    CHECK(make_plan(in).best_group >= p.best_group);
    // Heads that do not split over a group make that schedule impossible, with the reason.
    in.heads = 6;
    in.kv_heads = 6;
    in.nodes = 4;
    in.seq = 4096;
    const Plan q = make_plan(in);
    REQUIRE(q.schedules.size() == 3);
    CHECK(q.schedules[1].possible);  // 3 heads a rank
    CHECK_FALSE(q.schedules[2].possible);
    CHECK(q.schedules[2].why_not == "6 heads do not split over 4");
    CHECK(q.best_group != 4);
  }

  TEST_CASE("b*: a 1 TFLOP/s CPU node on 25 GbE (~3 GB/s) hides transfers above b ~ 330") {
    const double b_star = min_block_for_overlap(4096, 4096, 2, 1e12, 3e9);
    CHECK(b_star == doctest::Approx(333).epsilon(0.01));
    CHECK(b_star == doctest::Approx(1e12 / 3e9));  // s = 2, d_kv = d: b* = F / B, the seed's b·B/F > 1
    // At b = b* compute and transfer are equal; GQA shrinks b* by kv_heads/heads.
    CHECK(step_flops(333, 4096) / 1e12 == doctest::Approx(step_bytes(333, 4096, 2) / 3e9).epsilon(0.01));
    CHECK(min_block_for_overlap(4096, 1024, 2, 1e12, 3e9) == doctest::Approx(b_star / 4));

    PlanInput cpu = seed_input(32, 3e9);
    cpu.flops = 1e12;
    const Plan plan = make_plan(cpu);
    CHECK(plan.min_block == doctest::Approx(333).epsilon(0.01));
    CHECK(plan.min_block_causal == doctest::Approx(2 * plan.min_block));
    // Consistency: the margin at any b equals b / b*.
    CHECK(plan.full.margin == doctest::Approx(static_cast<double>(plan.block) / plan.min_block));
  }

  TEST_CASE("per-node memory is O(b·d): shards plus two transfer buffers") {
    const Plan p = make_plan(seed_input(8, 50e9));
    const double b = 16384;
    CHECK(p.node_q_bytes == b * 4096 * 2);
    CHECK(p.node_kv_bytes == 2 * b * 1024 * 2);
    CHECK(p.node_transfer_buffer_bytes == 2 * p.node_kv_bytes);
    CHECK(p.node_o_bytes == b * 4096 * 4 + 2 * b * 32 * 4);
    CHECK(p.node_attention_bytes == p.node_q_bytes + p.node_kv_bytes + p.node_o_bytes + p.node_transfer_buffer_bytes);
    CHECK(p.node_kv_all_layers_bytes == doctest::Approx(p.kv_bytes_all_layers / 64));
  }

  TEST_CASE("uneven split: the busiest node holds ceil(N / P)") {
    PlanInput in = seed_input(32, 50e9);
    in.seq = 1000;
    in.nodes = 3;
    CHECK(make_plan(in).block == 334);
  }

  TEST_CASE("training: the backward step is 2.5x the FLOPs and carries fp32 dK/dV; its b* is where the margin is 1") {
    PlanInput in = seed_input(8, 3e9);
    in.flops = 1e12;
    for (int s : {2, 4}) {
      in.dtype_bytes = s;
      const Plan p = make_plan(in);
      CHECK(p.backward.flops == doctest::Approx(2.5 * p.full.flops));
      CHECK(p.backward.bytes == doctest::Approx(p.full.bytes * (s + 4) / s));
      CHECK(p.backward_causal.flops == doctest::Approx(p.backward.flops / 2));
      // b* over forward's: 2(s+4)/(5s) = 1.2 at bf16, 0.8 at fp32.
      CHECK(p.min_block_backward / p.min_block == doctest::Approx(2.0 * (s + 4) / (5.0 * s)));
      CHECK(p.min_block_backward_causal == doctest::Approx(2 * p.min_block_backward));
      PlanInput at = in;
      at.block = static_cast<std::int64_t>(std::llround(p.min_block_backward * 64)) / 64;  // ~b*
      at.block = std::max<std::int64_t>(*at.block, 1);
      const Plan q = make_plan(at);
      CHECK(q.backward.margin == doctest::Approx(static_cast<double>(*at.block) / p.min_block_backward).epsilon(1e-9));
      CHECK(p.training_seconds_per_layer ==
            doctest::Approx(p.ring_seconds_per_layer +
                            64 * std::max(p.backward.compute_seconds, p.backward.transfer_seconds)));
    }
  }

  TEST_CASE("bad input names the field") {
    PlanInput in = seed_input(32, 50e9);
    in.kv_heads = 5;
    CHECK_THROWS_WITH_AS(make_plan(in), doctest::Contains("--kv-heads 5 must divide --heads 32"), ringattn::InvalidArgument);
    in = seed_input(32, 50e9);
    in.nodes = 0;
    CHECK_THROWS_WITH_AS(make_plan(in), doctest::Contains("--nodes"), ringattn::InvalidArgument);
    in = seed_input(32, 0);
    CHECK_THROWS_WITH_AS(make_plan(in), doctest::Contains("--bandwidth"), ringattn::InvalidArgument);
  }
}
