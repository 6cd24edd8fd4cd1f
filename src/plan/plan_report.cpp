#include "plan_report.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "units.hpp"

namespace ringattn::plan {
namespace {

std::string schedule_name(std::int64_t group, std::int64_t nodes) {
  if (group == 1) return "ring";
  if (group == nodes) return "Ulysses";
  return "hybrid, groups of " + std::to_string(group);
}

std::string dtype_name(int bytes) { return bytes == 2 ? "bf16" : bytes == 4 ? "fp32" : std::to_string(bytes) + "-byte"; }

// b* rounded up: the smallest whole block that still hides the transfer.
std::string tokens(double b) { return format_count(static_cast<std::int64_t>(std::ceil(b))); }

std::string pct(double fraction) { return format_sig(100 * fraction, 3) + " %"; }

std::string step_row(const char* label, const StepCost& c) {
  std::ostringstream os;
  os << "  " << label << format_sig(c.flops) << " FLOP in " << format_seconds(c.compute_seconds) << "  vs  "
     << format_bytes(c.bytes) << " in " << format_seconds(c.transfer_seconds) << "  ->  margin "
     << format_sig(c.margin) << "x, " << to_string(c.verdict) << "\n";
  return os.str();
}

// A JSON object writer for flat and nested objects of numbers, strings and booleans;
// the planner needs nothing else, and the keys are fixed identifiers (no escaping).
class Json {
 public:
  Json& open(const char* key = nullptr) {
    sep();
    if (key) os_ << '"' << key << "\":";
    os_ << '{';
    first_ = true;
    return *this;
  }
  Json& close() {
    os_ << '}';
    first_ = false;
    return *this;
  }
  Json& num(const char* key, double v) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    return raw(key, std::string(buf, r.ptr));
  }
  Json& num(const char* key, std::int64_t v) { return raw(key, std::to_string(v)); }
  Json& boolean(const char* key, bool v) { return raw(key, v ? "true" : "false"); }
  Json& str(const char* key, std::string_view v) { return raw(key, std::string("\"").append(v).append("\"")); }
  Json& null(const char* key) { return raw(key, "null"); }
  Json& step(const char* key, const StepCost& c) {
    return open(key)
        .num("flops", c.flops)
        .num("bytes", c.bytes)
        .num("compute_seconds", c.compute_seconds)
        .num("transfer_seconds", c.transfer_seconds)
        .num("margin", c.margin)
        .str("verdict", to_string(c.verdict))
        .close();
  }
  std::string text() const { return os_.str(); }

 private:
  void sep() {
    if (!first_) os_ << ',';
    first_ = false;
  }
  Json& raw(const char* key, const std::string& value) {
    sep();
    os_ << '"' << key << "\":" << value;
    return *this;
  }
  std::ostringstream os_;
  bool first_ = true;
};

}  // namespace

std::string format_plan_text(const Plan& p) {
  const PlanInput& in = p.in;
  std::ostringstream os;
  os << "ring attention plan: N = " << format_count(in.seq) << " tokens on P = " << in.nodes
     << " nodes, b = " << format_count(p.block) << " tokens per node\n";
  os << "  model  d = " << p.d << " (" << in.heads << " heads x " << in.head_dim << "), " << in.kv_heads
     << " KV heads (d_kv = " << p.d_kv << "), " << in.layers << " layers, " << dtype_name(in.dtype_bytes) << " ("
     << in.dtype_bytes << " bytes)\n";
  os << "  node   F = " << format_rate(in.flops, "FLOP/s") << (in.flops_assumed ? " (assumed)" : "")
     << ", link B = " << format_rate(in.bandwidth, "B/s") << (in.bandwidth_assumed ? " (assumed)" : "") << "\n";
  if (in.flops_assumed || in.bandwidth_assumed)
    os << "         assumed = this machine's class: one Zen 4 core per node (110 GFLOP/s fp32, 220 bf16),\n"
          "         loopback/veth TCP 2.5 GB/s; give --flops and --bandwidth for your hardware\n";

  os << "\nmemory bill (K and V of the whole context, 2*N*d_kv*s)\n";
  os << "  per layer           " << format_bytes(p.kv_bytes_per_layer);
  if (in.kv_heads != in.heads) os << "  (MHA would be " << format_bytes(p.kv_bytes_per_layer_mha) << ")";
  os << "\n  all " << in.layers << " layers       " << format_bytes(p.kv_bytes_all_layers) << "\n";
  os << "per node\n";
  os << "  attention, 1 layer  " << format_bytes(p.node_attention_bytes) << " = Q " << format_bytes(p.node_q_bytes)
     << " + K/V shard " << format_bytes(p.node_kv_bytes) << " + O (fp32) " << format_bytes(p.node_o_bytes)
     << " + 2 transfer buffers " << format_bytes(p.node_transfer_buffer_bytes) << "\n";
  const std::string label = "K/V shard, " + std::to_string(in.layers) + " layers";
  os << "  " << label << std::string(label.size() < 20 ? 20 - label.size() : 1, ' ')
     << format_bytes(p.node_kv_all_layers_bytes) << "\n";

  os << "\none ring step: compute 4*b^2*d / F vs transfer 2*b*d_kv*s / B (hidden >= " << kHiddenMargin
     << "x, marginal >= " << kMarginalMargin << "x, else stalls)\n";
  os << step_row("no mask          ", p.full);
  os << step_row("causal (zigzag)  ", p.causal);
  os << "  minimum b for overlap  b* = d_kv*s*F / (2*d*B) = " << tokens(p.min_block) << " tokens (causal zigzag: "
     << tokens(p.min_block_causal) << "); this plan has b = " << format_count(p.block) << "\n";
  os << "  one layer's ring   ~ " << in.nodes << " steps x " << format_seconds(std::max(p.full.compute_seconds, p.full.transfer_seconds))
     << " = " << format_seconds(p.ring_seconds_per_layer) << "\n";

  os << "\ntraining: the backward ring, compute 10*b^2*d / F vs transfer 2*b*d_kv*(s+4) / B (K/V and fp32 dK/dV)\n";
  os << step_row("no mask          ", p.backward);
  os << step_row("causal (zigzag)  ", p.backward_causal);
  os << "  minimum b for overlap  b* = d_kv*(s+4)*F / (5*d*B) = " << tokens(p.min_block_backward)
     << " tokens (causal zigzag: " << tokens(p.min_block_backward_causal) << ")\n";
  os << "  one layer, forward + backward ~ " << format_seconds(p.training_seconds_per_layer)
     << "; per node " << format_bytes(p.node_training_bytes)
     << " (Q, K, V, dO; O, lse, dQ, dK, dV in fp32; two blocks with their accumulators)\n";

  os << "\ntraffic per node per layer (elements, bytes at " << dtype_name(in.dtype_bytes) << ")\n";
  os << "  ring     2*d_kv*(N-b)            " << format_sig(p.ring_elements) << "  "
     << format_bytes(p.ring_elements * in.dtype_bytes) << "\n";
  os << "  Ulysses  (2d+2d_kv)*b*(P-1)/P    " << format_sig(p.ulysses_elements) << "  "
     << format_bytes(p.ulysses_elements * in.dtype_bytes) << "\n";
  if (in.nodes > 1)
    os << "  ring / Ulysses = " << format_sig(p.ring_over_ulysses) << " (with MHA exactly P/2 = " << format_sig(in.nodes / 2.0)
       << ")";
  os << (p.ulysses_possible ? "\n" : "; Ulysses is not possible here: it needs P <= heads (" + std::to_string(in.heads) + ")\n");

  os << "\nattention schedules, one layer's forward without a mask (all-to-alls at "
     << format_rate(in.group_bandwidth > 0 ? in.group_bandwidth : in.bandwidth, "B/s") << " a node, the ring across at "
     << format_rate(in.bandwidth, "B/s") << ")\n";
  for (const ScheduleCost& c : p.schedules) {
    const std::int64_t groups = in.nodes / c.group;
    const std::string name = schedule_name(c.group, in.nodes);
    os << "  " << name << std::string(name.size() < 22 ? 22 - name.size() : 1, ' ');
    if (!c.possible) {
      os << "not possible: " << c.why_not << "\n";
      continue;
    }
    os << format_seconds(c.seconds);
    if (c.group > 1) os << " = all-to-alls " << format_bytes(c.all_to_all_bytes) << " " << format_seconds(c.all_to_all_seconds);
    if (groups > 1)
      os << (c.group > 1 ? " + " : " = ") << groups << " ring steps x max(" << format_seconds(c.step_compute_seconds)
         << " compute, " << format_seconds(c.step_transfer_seconds) << " transfer)";
    else
      os << " + the kernel " << format_seconds(c.ring_seconds);
    os << (c.group == p.best_group ? "  <- fastest" : "") << "\n";
  }

  os << "\ncausal load balance\n";
  os << "  contiguous  utilisation (P+1)/2P = " << pct(p.contiguous_utilisation) << "  (node i does i+1 of "
     << in.nodes << " block pairs)\n";
  os << "  zigzag      utilisation " << pct(p.zigzag_utilisation) << "  (every node " << p.zigzag_units
     << " = 2P+1 half-chunk units)\n";
  if (in.cached && in.fresh) {
    const bool q = prefix_pays(*in.cached, *in.fresh, in.nodes);
    os << "\nprefix cache: " << format_count(*in.cached) << " cached + " << format_count(*in.fresh) << " new tokens on " << in.nodes
       << " nodes\n";
    if (*in.fresh >= in.nodes && q)
      os << "  new >= P: pass-Q, the new tokens dealt over the nodes (~" << format_count((*in.fresh + in.nodes - 1) / in.nodes)
         << " a node against " << format_count((*in.cached + *in.fresh + in.nodes - 1) / in.nodes)
         << " for a prefill afresh), their queries around the ring past the cached rows\n";
    else if (*in.fresh >= in.nodes)
      os << "  new >= P, but cached x P = " << format_count(*in.cached * in.nodes) << " < " << format_count(*in.fresh)
         << " new  ->  prefill the whole prompt afresh over the ring (a share under 1/P of the new tokens saves too little to cut "
            "the cached entry for)\n";
    else
      os << "  new < P: on one node; new x (P-1) = " << format_count(*in.fresh * (in.nodes - 1)) << (q ? " < " : " >= ")
         << format_count(*in.cached) << " cached  ->  "
         << (q ? "pass-Q: the new tokens' layers on one node, their queries around the ring past the cached rows"
               : "prefill the whole prompt afresh over the ring (the cached rows are not worth their one node's work)")
         << "\n";
  }
  return os.str();
}

std::string format_plan_json(const Plan& p) {
  const PlanInput& in = p.in;
  Json j;
  j.open()
      .open("input")
      .num("heads", in.heads)
      .num("head_dim", in.head_dim)
      .num("kv_heads", in.kv_heads)
      .num("layers", in.layers)
      .num("seq", in.seq)
      .num("nodes", in.nodes)
      .num("block", p.block)
      .num("d", p.d)
      .num("d_kv", p.d_kv)
      .num("dtype_bytes", static_cast<std::int64_t>(in.dtype_bytes))
      .num("flops_per_second", in.flops)
      .num("bandwidth_bytes_per_second", in.bandwidth)
      .boolean("flops_assumed", in.flops_assumed)
      .boolean("bandwidth_assumed", in.bandwidth_assumed)
      .close()
      .open("memory")
      .num("kv_bytes_per_layer", p.kv_bytes_per_layer)
      .num("kv_bytes_all_layers", p.kv_bytes_all_layers)
      .num("kv_bytes_per_layer_mha", p.kv_bytes_per_layer_mha)
      .num("node_q_bytes", p.node_q_bytes)
      .num("node_kv_bytes", p.node_kv_bytes)
      .num("node_o_bytes", p.node_o_bytes)
      .num("node_transfer_buffer_bytes", p.node_transfer_buffer_bytes)
      .num("node_attention_bytes", p.node_attention_bytes)
      .num("node_kv_all_layers_bytes", p.node_kv_all_layers_bytes)
      .close()
      .step("step", p.full)
      .step("step_causal_zigzag", p.causal)
      .open("overlap")
      .num("min_block", p.min_block)
      .num("min_block_causal_zigzag", p.min_block_causal)
      .num("hidden_margin", kHiddenMargin)
      .num("marginal_margin", kMarginalMargin)
      .num("ring_seconds_per_layer", p.ring_seconds_per_layer)
      .close()
      .open("training")
      .step("backward_step", p.backward)
      .step("backward_step_causal_zigzag", p.backward_causal)
      .num("min_block_backward", p.min_block_backward)
      .num("min_block_backward_causal_zigzag", p.min_block_backward_causal)
      .num("seconds_per_layer", p.training_seconds_per_layer)
      .num("node_bytes", p.node_training_bytes)
      .close()
      .open("traffic")
      .num("ring_elements", p.ring_elements)
      .num("ulysses_elements", p.ulysses_elements);
  if (in.nodes > 1)
    j.num("ring_over_ulysses", p.ring_over_ulysses);
  else
    j.null("ring_over_ulysses");
  j.boolean("ulysses_possible", p.ulysses_possible).close().open("schedules");
  for (const ScheduleCost& c : p.schedules) {
    const std::string key = c.group == 1 ? "ring" : c.group == in.nodes ? "ulysses" : "hybrid_" + std::to_string(c.group);
    j.open(key.c_str()).num("group", c.group).boolean("possible", c.possible);
    if (c.possible)
      j.num("seconds", c.seconds)
          .num("all_to_all_bytes", c.all_to_all_bytes)
          .num("all_to_all_seconds", c.all_to_all_seconds)
          .num("ring_bytes", c.ring_bytes)
          .num("ring_seconds", c.ring_seconds)
          .num("step_compute_seconds", c.step_compute_seconds)
          .num("step_transfer_seconds", c.step_transfer_seconds);
    else
      j.str("why_not", c.why_not);
    j.close();
  }
  j.num("best_group", p.best_group)
      .num("group_bandwidth_bytes_per_second", in.group_bandwidth > 0 ? in.group_bandwidth : in.bandwidth)
      .close()
      .open("causal_balance")
      .num("contiguous_utilisation", p.contiguous_utilisation)
      .num("zigzag_utilisation", p.zigzag_utilisation)
      .num("zigzag_units_per_node", p.zigzag_units)
      .close();
  if (in.cached && in.fresh)
    j.open("prefix_cache")
        .num("cached", *in.cached)
        .num("new", *in.fresh)
        .str("choice", prefix_pays(*in.cached, *in.fresh, in.nodes) ? "pass_q" : "prefill")
        .close();
  j.close();
  return j.text() + "\n";
}

}  // namespace ringattn::plan
