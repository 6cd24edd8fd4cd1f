// ringattn — the seed's arithmetic for a ring-attention deployment, as pure functions.
//
// Symbols (as in the seed and DESIGN.md):
//   N  context length (tokens)         P  ring nodes            b = N / P tokens per node
//   d  query width = heads * head_dim  d_kv = kv_heads * head_dim (GQA shrinks it)
//   s  bytes per element (bf16 2, fp32 4)
//   F  useful FLOP/s of one node       B  link bytes/s between ring neighbours
//
// One ring step on one node: compute T_c = 4·b²·d / F (QKᵀ and PV), transfer
// T_x = 2·b·d_kv·s / B (the K and V blocks hop one seat). Double buffering hides the
// transfer when T_c > T_x, i.e. b > b* = d_kv·s·F / (2·d·B). A causal mask under the
// zigzag layout halves the useful compute per step but not the bytes, so b* doubles.
//
// Training adds the backward ring (Ring::backward): per step T_c = 10·b²·d / F (the
// scores recomputed, then dP, dV, dK, dQ: 2.5x forward's FLOPs) against T_x =
// 2·b·d_kv·(s + 4) / B (K and V again, and their fp32 gradient accumulators), so its
// b* = d_kv·(s+4)·F / (5·d·B): 1.2x forward's at bf16, 0.8x at fp32.
//
// Byte counts are exact; "GB" in reports means 1e9 bytes, as the seed uses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringattn::plan {

// --- the seed's formulas, one per quantity -------------------------------------------

// K and V of one layer for the whole context: 2·N·d_kv·s bytes.
double kv_bytes_per_layer(std::int64_t seq, std::int64_t d_kv, int dtype_bytes);
// Useful FLOPs of one ring step (a b×b block, no mask): 4·b²·d.
double step_flops(std::int64_t block, std::int64_t d);
// Bytes a node sends (and receives) per ring step: 2·b·d_kv·s.
double step_bytes(std::int64_t block, std::int64_t d_kv, int dtype_bytes);
// Smallest block whose compute covers its transfer: d_kv·s·F / (2·d·B).
double min_block_for_overlap(std::int64_t d, std::int64_t d_kv, int dtype_bytes, double flops, double bandwidth);
// Backward: useful FLOPs of one step 10·b²·d; bytes sent per step 2·b·d_kv·(s + 4);
// the smallest block whose compute covers that: d_kv·(s+4)·F / (5·d·B).
double backward_step_flops(std::int64_t block, std::int64_t d);
double backward_step_bytes(std::int64_t block, std::int64_t d_kv, int dtype_bytes);
double min_block_for_backward_overlap(std::int64_t d, std::int64_t d_kv, int dtype_bytes, double flops, double bandwidth);
// Elements a node sends over a whole ring pass: 2·d_kv·(N − b).
double ring_traffic_elements(std::int64_t seq, std::int64_t block, std::int64_t d_kv);
// Elements a node sends in Ulysses' two all-to-alls: it keeps 1/P of each of Q, K, V
// (before attention) and O (after) and ships the rest: (2·d + 2·d_kv)·b·(P−1)/P.
// For MHA that is the seed's "about 4·b·d", and ring / Ulysses = P/2 exactly.
double ulysses_traffic_elements(std::int64_t block, std::int64_t d, std::int64_t d_kv, std::int64_t nodes);
// Causal contiguous ring: node i does i+1 of P block-pairs, the step waits for the
// busiest, so utilisation = useful / (P · busiest) = (P+1) / 2P.
double causal_contiguous_utilisation(std::int64_t nodes);
// Zigzag: 2P half-chunks, chunk c carries c+1 units; node i holds chunks i and
// 2P−1−i, so (i+1) + (2P−i) = 2P+1 units on every node and utilisation 1.
std::int64_t zigzag_units_per_node(std::int64_t nodes);

// --- verdict on the margin T_c / T_x ---------------------------------------------------

// hidden   margin >= 1.5: the transfer finishes with room for the kernel missing its
//          peak, the link missing its rate and (on CPUs) socket copies stealing cycles.
// marginal 1 <= margin < 1.5: hidden on paper, any of those effects makes it a stall.
// stalls   margin < 1: every step waits for the network.
enum class Verdict { hidden, marginal, stalls };
inline constexpr double kHiddenMargin = 1.5;
inline constexpr double kMarginalMargin = 1.0;
Verdict classify_margin(double margin);
std::string_view to_string(Verdict v);

// --- a prompt on top of a cached prefix (the daemons' prefix cache) ----------------------

// Whether computing `fresh` new tokens past `shared` cached rows (pass-Q: the new tokens'
// layers, their queries around the ring past the stationary rows) costs less than
// prefilling the whole prompt afresh over `nodes` nodes. Every layer's matmuls are per
// token. Fewer new tokens than nodes go to one node: fresh x w there against
// (shared + fresh) x w / nodes spread, so they pay when fresh x (nodes - 1) < shared. At
// least as many are dealt over the nodes (infer's BatchPlan::follow_rows): ~fresh / nodes
// a node against (shared + fresh) / nodes, always less; but taking an entry cuts its rows
// past the shared part, so a share under 1 / nodes of the new tokens (a BOS, a short system
// prompt before a long document) saves too little to spend the entry on: they pay when
// shared x nodes >= fresh. Attention is spread over the nodes either way, and pass-Q moves
// the new tokens' queries and partial outputs (a few KiB a token and layer), not the K/V.
bool prefix_pays(std::int64_t shared, std::int64_t fresh, std::int64_t nodes);

// --- a whole plan ------------------------------------------------------------------------

struct PlanInput {
  std::int64_t heads = 32;
  std::int64_t head_dim = 128;
  std::int64_t kv_heads = 32;
  std::int64_t layers = 32;
  std::int64_t seq = 1 << 20;
  std::int64_t nodes = 64;
  std::optional<std::int64_t> block;  // tokens per node; default ceil(seq / nodes)
  int dtype_bytes = 2;
  double flops = 0;       // per node, FLOP/s
  double bandwidth = 0;   // per link, bytes/s
  double group_bandwidth = 0;  // per node inside a mesh's group (Ulysses' all-to-alls); 0: bandwidth
  bool flops_assumed = false;
  bool bandwidth_assumed = false;
  // A prompt on the daemons' prefix cache: its cached and new tokens (both, or neither).
  std::optional<std::int64_t> cached, fresh;
};

struct StepCost {
  double flops = 0, bytes = 0;
  double compute_seconds = 0, transfer_seconds = 0;
  double margin = 0;  // compute / transfer
  Verdict verdict = Verdict::stalls;
};

// One attention schedule's forward for one layer (no mask): Ulysses inside groups of
// `group` ranks, the ring across the P/group groups (group 1: the ring, group P: Ulysses).
//   all-to-alls  per node (group-1)/group of its rows' q, k, v (storage dtype) out and of
//                O and lse (fp32) back, over its link into the group: not overlapped
//   ring across  P/group steps of a block of the group's rows on heads/group heads:
//                max(4·(G·b)²·(d/G)/F, 2·(G·b)·d_kv'·s/B) each, d_kv' the K/V width a rank
//                holds (K/V heads replicated when fewer than the group)
struct ScheduleCost {
  std::int64_t group = 1;
  bool possible = true;
  std::string why_not;         // when not possible
  double all_to_all_bytes = 0, all_to_all_seconds = 0;
  double ring_bytes = 0, step_compute_seconds = 0, step_transfer_seconds = 0, ring_seconds = 0;
  double seconds = 0;          // all-to-alls + ring across
};
// Every schedule: the ring, each hybrid of a group size dividing P, Ulysses.
std::vector<ScheduleCost> schedule_costs(const PlanInput& in, std::int64_t block);

struct Plan {
  PlanInput in;
  std::int64_t d = 0, d_kv = 0, block = 0;

  // Memory bill for the whole context.
  double kv_bytes_per_layer = 0, kv_bytes_all_layers = 0;
  double kv_bytes_per_layer_mha = 0;  // the same with kv_heads = heads, for comparison
  // Per node: one layer's attention working set, and its K/V shard over all layers.
  double node_q_bytes = 0, node_kv_bytes = 0, node_o_bytes = 0, node_transfer_buffer_bytes = 0;
  double node_attention_bytes = 0, node_kv_all_layers_bytes = 0;

  StepCost full;    // no mask (every block pair is all useful)
  StepCost causal;  // zigzag causal: half the useful compute per step, same bytes
  double min_block = 0, min_block_causal = 0;
  double ring_seconds_per_layer = 0;  // P steps at max(T_c, T_x), no mask

  // Training: the backward ring's step (no mask, and causal zigzag: half the FLOPs, the
  // same bytes), its b*, one layer's forward + backward, and a node's training memory for
  // one layer (Q, K, V, dO in the storage dtype; O, lse, dQ, dK, dV in fp32; two blocks in
  // flight with their fp32 accumulators).
  StepCost backward, backward_causal;
  double min_block_backward = 0, min_block_backward_causal = 0;
  double training_seconds_per_layer = 0;
  double node_training_bytes = 0;

  double ring_elements = 0, ulysses_elements = 0, ring_over_ulysses = 0;
  bool ulysses_possible = false;  // Ulysses gives each node whole heads: P <= heads

  std::vector<ScheduleCost> schedules;  // ring, hybrids, Ulysses: one layer's forward each
  std::int64_t best_group = 1;          // the fastest possible one

  double contiguous_utilisation = 0, zigzag_utilisation = 1;
  std::int64_t zigzag_units = 0;
};

// Validates the input (InvalidArgument naming the field) and evaluates every formula.
Plan make_plan(const PlanInput& in);

}  // namespace ringattn::plan
