#include "cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ringattn/error.hpp"

namespace ringattn::plan {
namespace {

double dbl(std::int64_t v) { return static_cast<double>(v); }

void require(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument("plan: " + what);
}

StepCost step_cost(double flops, double bytes, double node_flops, double bandwidth) {
  StepCost c;
  c.flops = flops;
  c.bytes = bytes;
  c.compute_seconds = flops / node_flops;
  c.transfer_seconds = bytes / bandwidth;
  c.margin = c.compute_seconds / c.transfer_seconds;
  c.verdict = classify_margin(c.margin);
  return c;
}

}  // namespace

double kv_bytes_per_layer(std::int64_t seq, std::int64_t d_kv, int dtype_bytes) {
  return 2.0 * dbl(seq) * dbl(d_kv) * dtype_bytes;
}

double step_flops(std::int64_t block, std::int64_t d) { return 4.0 * dbl(block) * dbl(block) * dbl(d); }

double step_bytes(std::int64_t block, std::int64_t d_kv, int dtype_bytes) {
  return 2.0 * dbl(block) * dbl(d_kv) * dtype_bytes;
}

double min_block_for_overlap(std::int64_t d, std::int64_t d_kv, int dtype_bytes, double flops, double bandwidth) {
  return dbl(d_kv) * dtype_bytes * flops / (2.0 * dbl(d) * bandwidth);
}

double backward_step_flops(std::int64_t block, std::int64_t d) { return 2.5 * step_flops(block, d); }

double backward_step_bytes(std::int64_t block, std::int64_t d_kv, int dtype_bytes) {
  return 2.0 * dbl(block) * dbl(d_kv) * (dtype_bytes + 4);
}

double min_block_for_backward_overlap(std::int64_t d, std::int64_t d_kv, int dtype_bytes, double flops,
                                      double bandwidth) {
  return dbl(d_kv) * (dtype_bytes + 4) * flops / (5.0 * dbl(d) * bandwidth);
}

double ring_traffic_elements(std::int64_t seq, std::int64_t block, std::int64_t d_kv) {
  return 2.0 * dbl(d_kv) * dbl(seq - block);
}

double ulysses_traffic_elements(std::int64_t block, std::int64_t d, std::int64_t d_kv, std::int64_t nodes) {
  return (2.0 * dbl(d) + 2.0 * dbl(d_kv)) * dbl(block) * dbl(nodes - 1) / dbl(nodes);
}

double causal_contiguous_utilisation(std::int64_t nodes) { return dbl(nodes + 1) / (2.0 * dbl(nodes)); }

std::int64_t zigzag_units_per_node(std::int64_t nodes) { return 2 * nodes + 1; }

Verdict classify_margin(double margin) {
  if (margin >= kHiddenMargin) return Verdict::hidden;
  if (margin >= kMarginalMargin) return Verdict::marginal;
  return Verdict::stalls;
}

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::hidden: return "hidden";
    case Verdict::marginal: return "marginal";
    case Verdict::stalls: return "stalls";
  }
  return "?";
}

Plan make_plan(const PlanInput& in) {
  require(in.heads >= 1, "--heads must be at least 1");
  require(in.head_dim >= 1, "--head-dim must be at least 1");
  require(in.kv_heads >= 1 && in.kv_heads <= in.heads && in.heads % in.kv_heads == 0,
          "--kv-heads " + std::to_string(in.kv_heads) + " must divide --heads " + std::to_string(in.heads));
  require(in.layers >= 1, "--layers must be at least 1");
  require(in.seq >= 1, "--seq must be at least 1");
  require(in.nodes >= 1 && in.nodes <= in.seq,
          "--nodes " + std::to_string(in.nodes) + " must be between 1 and --seq " + std::to_string(in.seq));
  require(in.dtype_bytes >= 1, "dtype size must be positive");
  require(std::isfinite(in.flops) && in.flops > 0, "--flops must be a positive number of FLOP/s");
  require(std::isfinite(in.bandwidth) && in.bandwidth > 0, "--bandwidth must be a positive number of bytes/s");
  if (in.block) require(*in.block >= 1 && *in.block <= in.seq, "--block must be between 1 and --seq");

  Plan p;
  p.in = in;
  p.d = in.heads * in.head_dim;
  p.d_kv = in.kv_heads * in.head_dim;
  // Uneven splits: the busiest node holds ceil(N / P) tokens and gates every step.
  p.block = in.block ? *in.block : (in.seq + in.nodes - 1) / in.nodes;
  const int s = in.dtype_bytes;
  const double b = dbl(p.block);

  p.kv_bytes_per_layer = kv_bytes_per_layer(in.seq, p.d_kv, s);
  p.kv_bytes_all_layers = p.kv_bytes_per_layer * dbl(in.layers);
  p.kv_bytes_per_layer_mha = kv_bytes_per_layer(in.seq, p.d, s);

  // Q, K, V shards at the storage dtype; O and the per-row (m, l) accumulate in fp32.
  p.node_q_bytes = b * dbl(p.d) * s;
  p.node_kv_bytes = step_bytes(p.block, p.d_kv, s);
  p.node_o_bytes = b * dbl(p.d) * 4 + 2.0 * b * dbl(in.heads) * 4;
  p.node_transfer_buffer_bytes = 2.0 * step_bytes(p.block, p.d_kv, s);
  p.node_attention_bytes = p.node_q_bytes + p.node_kv_bytes + p.node_o_bytes + p.node_transfer_buffer_bytes;
  p.node_kv_all_layers_bytes = p.node_kv_bytes * dbl(in.layers);

  const double bytes = step_bytes(p.block, p.d_kv, s);
  p.full = step_cost(step_flops(p.block, p.d), bytes, in.flops, in.bandwidth);
  p.causal = step_cost(step_flops(p.block, p.d) / 2, bytes, in.flops, in.bandwidth);
  p.min_block = min_block_for_overlap(p.d, p.d_kv, s, in.flops, in.bandwidth);
  p.min_block_causal = 2 * p.min_block;
  p.ring_seconds_per_layer = dbl(in.nodes) * std::max(p.full.compute_seconds, p.full.transfer_seconds);

  const double bwd_bytes = backward_step_bytes(p.block, p.d_kv, s);
  p.backward = step_cost(backward_step_flops(p.block, p.d), bwd_bytes, in.flops, in.bandwidth);
  p.backward_causal = step_cost(backward_step_flops(p.block, p.d) / 2, bwd_bytes, in.flops, in.bandwidth);
  p.min_block_backward = min_block_for_backward_overlap(p.d, p.d_kv, s, in.flops, in.bandwidth);
  p.min_block_backward_causal = 2 * p.min_block_backward;
  p.training_seconds_per_layer =
      p.ring_seconds_per_layer + dbl(in.nodes) * std::max(p.backward.compute_seconds, p.backward.transfer_seconds);
  p.node_training_bytes = b * dbl(p.d) * s * 2                     // Q, dO
                          + b * dbl(p.d_kv) * s * 2                // K, V
                          + b * dbl(p.d) * 4 * 2                   // O, dQ
                          + b * dbl(in.heads) * 4 * 2              // lse, D
                          + b * dbl(p.d_kv) * 4 * 2                // dK, dV
                          + 2.0 * (p.node_kv_bytes + b * dbl(p.d_kv) * 4 * 2);  // two blocks + accumulators

  p.ring_elements = ring_traffic_elements(in.seq, p.block, p.d_kv);
  p.ulysses_elements = ulysses_traffic_elements(p.block, p.d, p.d_kv, in.nodes);
  p.ring_over_ulysses = in.nodes > 1 ? p.ring_elements / p.ulysses_elements : 0;
  p.ulysses_possible = in.nodes <= in.heads;

  p.schedules = schedule_costs(in, p.block);
  double best = 0;
  for (const ScheduleCost& c : p.schedules)
    if (c.possible && (best == 0 || c.seconds < best)) {
      best = c.seconds;
      p.best_group = c.group;
    }

  p.contiguous_utilisation = causal_contiguous_utilisation(in.nodes);
  p.zigzag_utilisation = 1.0;
  p.zigzag_units = zigzag_units_per_node(in.nodes);
  return p;
}

std::vector<ScheduleCost> schedule_costs(const PlanInput& in, std::int64_t block) {
  std::vector<ScheduleCost> out;
  const double b = dbl(block), D = dbl(in.head_dim), s = in.dtype_bytes;
  const double group_bw = in.group_bandwidth > 0 ? in.group_bandwidth : in.bandwidth;
  for (std::int64_t g = 1; g <= in.nodes; ++g) {
    if (in.nodes % g != 0) continue;
    ScheduleCost c;
    c.group = g;
    const std::int64_t groups = in.nodes / g;
    // Ulysses' split inside the group (ring/ulysses.hpp): heads/G query heads a rank,
    // reading whole K/V heads or sharing one.
    const std::int64_t h = in.heads % g == 0 ? in.heads / g : 0, share = in.heads / in.kv_heads;
    if (h == 0) {
      c.possible = false;
      c.why_not = std::to_string(in.heads) + " heads do not split over " + std::to_string(g);
    } else if (h % share != 0 && share % h != 0) {
      c.possible = false;
      c.why_not = std::to_string(h) + " heads a rank would read parts of K/V heads";
    }
    const double hk = h == 0 ? 0 : (h % share == 0 ? dbl(h / share) : 1.0);
    if (g > 1) {
      const double out_bytes = b * (dbl(h) * D + 2 * hk * D) * s, back_bytes = b * (dbl(h) * D + dbl(h)) * 4;
      c.all_to_all_bytes = dbl(g - 1) * (out_bytes + back_bytes);
      c.all_to_all_seconds = c.all_to_all_bytes / group_bw;
    }
    const double rows = dbl(g) * b;  // a block across: the group's rows
    c.step_compute_seconds = 4 * rows * rows * dbl(h) * D / in.flops;
    const double step_bytes = 2 * rows * hk * D * s;
    c.step_transfer_seconds = groups > 1 ? step_bytes / in.bandwidth : 0;
    c.ring_bytes = dbl(groups - 1) * step_bytes;
    c.ring_seconds = dbl(groups) * std::max(c.step_compute_seconds, c.step_transfer_seconds);
    c.seconds = c.all_to_all_seconds + c.ring_seconds;
    out.push_back(c);
  }
  return out;
}

bool prefix_pays(std::int64_t shared, std::int64_t fresh, std::int64_t nodes) {
  if (shared <= 0 || fresh < 0 || nodes < 1) return false;
  return fresh < nodes ? fresh * (nodes - 1) < shared : shared * nodes >= fresh;
}

}  // namespace ringattn::plan
