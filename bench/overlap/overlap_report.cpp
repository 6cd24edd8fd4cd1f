#include "overlap_report.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "../common/svg_plot.hpp"
#include "../../src/cli/json_object.hpp"

namespace ringattn::bench::overlap {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string layout_of(const std::string& mask) { return mask == "causal" ? "zigzag" : "contiguous"; }

double ratio(const SweepSummary& s) { return s.measured && s.predicted ? *s.measured / *s.predicted : NAN; }
double ratio_peak(const SweepSummary& s) { return s.measured && s.predicted_peak > 0 ? *s.measured / s.predicted_peak : NAN; }

// Text split for wrapping: after each "; ", and at spaces inside a piece still too long.
std::vector<std::string> split_summary(const std::string& text) {
  std::vector<std::string> pieces, out;
  std::size_t start = 0;
  for (auto at = text.find("; "); at != std::string::npos; at = text.find("; ", start)) {
    pieces.push_back(text.substr(start, at + 2 - start));
    start = at + 2;
  }
  pieces.push_back(text.substr(start));
  for (const auto& p : pieces) {
    if (p.size() <= 150) {
      out.push_back(p);
      continue;
    }
    std::size_t from = 0;
    for (auto sp = p.find(' ', 1); from < p.size(); sp = p.find(' ', sp + 1)) {
      if (sp == std::string::npos) sp = p.size();
      out.push_back(p.substr(from, sp - from));
      from = sp;
    }
  }
  return out;
}

std::string opt_tokens(const std::optional<double>& v) { return v ? fmt("%.0f", *v) : std::string("none in range"); }

}  // namespace

TargetCheck check_targets(const SweepSummary& s) {
  TargetCheck t;
  const double r = ratio(s);
  t.ratio_ok = std::isfinite(r) && r >= 0.8 && r <= 1.25;
  // Medians over the sizes on each side: one disturbed size (a shared machine) must not
  // decide; the worst values are reported beside them.
  t.above_ok = s.rows_above == 0 || s.overlap_over_compute_median <= 1.1;
  t.below_ok = s.rows_below == 0 || s.overlap_over_transfer_median <= 1.1;
  return t;
}

std::string csv_header() {
  return "mask,layout,rank,b,t_compute_s,t_transfer_s,t_serial_s,t_overlap_s,t_fold_in_overlap_s,t_overlap_model_s,"
         "useful_flops,block_bytes,flops_per_s,bytes_per_s,io_cpu_s_per_byte,io_cpu_s_per_byte_overlap,"
         "cpu_share,reps_compute,reps_transfer,reps_serial,reps_overlap\n";
}

std::string csv_row(const StepRow& r, const SweepSummary& s) {
  const double model = overlap_step_model(r.t_compute, r.t_transfer, s.cpu_per_byte, r.block_bytes, s.cores);
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s,%s,%d,%lld,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.4g,%.4g,%.3f,%d,%d,%d,%d\n",
                r.mask.c_str(), layout_of(r.mask).c_str(), r.rank, static_cast<long long>(r.b), r.t_compute,
                r.t_transfer, r.t_serial, r.t_overlap, r.t_fold_in_overlap, model, r.useful_flops, r.block_bytes,
                r.flops_per_second(), r.bytes_per_second(), r.io_cpu_per_byte, r.io_cpu_per_byte_overlap,
                r.cpu_share, r.reps_compute, r.reps_transfer, r.reps_serial, r.reps_overlap);
  return buf;
}

std::string row_json(const StepRow& r, const SweepSummary& s, const SweepSpec& spec, const RunInfo& info) {
  const double model = overlap_step_model(r.t_compute, r.t_transfer, s.cpu_per_byte, r.block_bytes, s.cores);
  cli::JsonObject o;
  o.add("bench", "overlap").add("kind", "row").add("mask", r.mask).add("layout", layout_of(r.mask));
  o.add("link", info.link).add("nodes", spec.nodes).add("rank", r.rank).add("b", static_cast<std::int64_t>(r.b));
  o.add("t_compute_s", r.t_compute).add("t_transfer_s", r.t_transfer).add("t_serial_s", r.t_serial);
  o.add("t_overlap_s", r.t_overlap).add("t_fold_in_overlap_s", r.t_fold_in_overlap).add("t_overlap_model_s", model);
  o.add("useful_flops", r.useful_flops).add("block_bytes", r.block_bytes);
  o.add("flops_per_s", r.flops_per_second()).add("bytes_per_s", r.bytes_per_second());
  o.add("io_cpu_s_per_byte", r.io_cpu_per_byte).add("io_cpu_s_per_byte_overlap", r.io_cpu_per_byte_overlap);
  o.add("cpu_share", r.cpu_share);
  o.add("reps", std::vector<std::int64_t>{r.reps_compute, r.reps_transfer, r.reps_serial, r.reps_overlap});
  return o.str();
}

std::string summary_json(const SweepSummary& s, const SweepSpec& spec, const RunInfo& info) {
  const TargetCheck t = check_targets(s);
  cli::JsonObject o;
  auto opt = [&](const char* key, const std::optional<double>& v) -> cli::JsonObject& {
    return v ? o.add(key, *v) : o.add_null(key);
  };
  o.add("bench", "overlap").add("kind", "summary").add("mask", s.mask).add("layout", layout_of(s.mask));
  o.add("pass", spec.backward ? "backward" : "forward");
  o.add("link", info.link).add("machine", info.machine).add("command", info.command);
  o.add("nodes", spec.nodes).add("cores_per_node", spec.cores).add("node0_cpus", info.node_cpus);
  o.add("heads", spec.heads).add("kv_heads", spec.kv_heads).add("head_dim", spec.head_dim);
  o.add("dtype", to_string(spec.dtype)).add("useful_fraction", s.useful_fraction);
  o.add("F_peak_flops_per_s", s.flops_peak).add("B_bytes_per_s", s.bandwidth).add("tcp_cpu_s_per_byte", s.cpu_per_byte);
  opt("b_star_predicted", s.predicted);
  o.add("b_star_predicted_peak_f", s.predicted_peak);
  opt("b_star_measured", s.measured);
  o.add("measured_crossings", s.measured_crossings).add("ratio_measured_over_predicted", ratio(s));
  o.add("ratio_measured_over_predicted_peak_f", ratio_peak(s)).add("tcp_factor", s.tcp_factor);
  opt("b_star_tcp_predicted", s.predicted_tcp);
  opt("b_star_tcp_measured", s.measured_tcp);
  o.add("rows_above_2b", s.rows_above).add("hidden_median_above_2b", s.hidden_median);
  o.add("hidden_min_above_2b", s.hidden_min).add("overlap_over_compute_above_2b", s.overlap_over_compute_median);
  o.add("worst_overlap_over_compute_above_2b", s.worst_overlap_over_compute).add("rows_below_half_b", s.rows_below);
  o.add("overlap_over_transfer_below_half_b", s.overlap_over_transfer_median);
  o.add("worst_overlap_over_transfer_below_half_b", s.worst_overlap_over_transfer);
  o.add("model_error_median", s.model_error_median).add("cpu_share_min", s.cpu_share_min);
  o.add("rows_disturbed", s.rows_disturbed).add("target_ratio_ok", t.ratio_ok).add("target_above_ok", t.above_ok);
  o.add("target_below_ok", t.below_ok).add("sweep_seconds", info.seconds);
  o.add("load_before", info.load_before).add("load_after", info.load_after);
  return o.str();
}

std::string summary_text(const SweepSummary& s) {
  std::string o = "overlap [" + s.mask + "/" + layout_of(s.mask) + "]: predicted b* " + opt_tokens(s.predicted) +
                  ", measured b* " + opt_tokens(s.measured);
  if (s.measured && s.measured_crossings > 1) o += " (one of " + std::to_string(s.measured_crossings) + " crossings)";
  if (s.measured && s.predicted) o += ", ratio " + fmt("%.2f", ratio(s));
  o += " (peak F " + fmt("%.1f", s.flops_peak / 1e9) + " GFLOP/s predicts " + fmt("%.0f", s.predicted_peak) +
       "; B " + fmt("%.3f", s.bandwidth / 1e9) + " GB/s)";
  if (s.rows_above)
    o += "; above 2·b* (" + std::to_string(s.rows_above) + " sizes, medians): " + fmt("%.0f", 100 * s.hidden_median) +
         " % of the transfer hidden, T_o/T_c " + fmt("%.2f", s.overlap_over_compute_median) + " (worst " +
         fmt("%.2f", s.worst_overlap_over_compute) + ")";
  if (s.rows_below)
    o += "; below b*/2 (" + std::to_string(s.rows_below) + " sizes): T_o/T_x " + fmt("%.2f", s.overlap_over_transfer_median) +
         " (worst " + fmt("%.2f", s.worst_overlap_over_transfer) + ")";
  o += "; TCP " + fmt("%.2f", s.cpu_per_byte * 1e9) + " CPU s/GB -> F_eff = " + fmt("%.2f", s.tcp_factor) +
       "·F, b*_tcp predicted " + opt_tokens(s.predicted_tcp) + ", measured " + opt_tokens(s.measured_tcp) +
       "; model T_o error median " + fmt("%.0f", 100 * s.model_error_median) + " %; kernel CPU share >= " +
       fmt("%.0f", 100 * s.cpu_share_min) + " %";
  if (s.rows_disturbed)
    o += " (" + std::to_string(s.rows_disturbed) + " sizes left out: their kernel had < " +
         fmt("%.0f", 100 * kMinCpuShare) + " % of its cores)";
  return o;
}

std::string plot_svg(const std::vector<StepRow>& rows, const SweepSummary& s, const SweepSpec& spec,
                     const RunInfo& info) {
  LogLogPlot p;
  p.title = std::string(spec.backward ? "Backward ring" : "Ring") + " step vs block size b: " + std::string(s.mask == "causal" ? "causal mask, zigzag layout" : "no mask") +
            ", P = " + std::to_string(spec.nodes);
  p.subtitle = "d = " + std::to_string(spec.heads * spec.head_dim) + " (" + std::to_string(spec.heads) + "×" +
               std::to_string(spec.head_dim) + "), d_kv = " + std::to_string(spec.kv_heads * spec.head_dim) + ", " +
               std::string(to_string(spec.dtype)) + " on the wire, " + std::to_string(spec.cores) +
               " CPU per node, the node's kernel and socket I/O on it";
  p.x = {"b (tokens per block)", 2, [](double v) { return fmt("%.0f", v); }};
  p.y = {"time per ring step (median)", 10, format_seconds};
  PlotSeries tc{"T_c  compute alone", {}, {}, "#1f77b4"}, tx{"T_x  transfer alone", {}, {}, "#ff7f0e"},
      to{"T_overlap  double-buffered step", {}, {}, "#2ca02c", 3},
      ts{"T_serial  compute, then transfer", {}, {}, "#999999", 1.5, true, false},
      tm{"model max(T_x, T_c + c·S/C)", {}, {}, "#2ca02c", 1.2, true, false};
  for (const auto& r : rows) {
    const double b = static_cast<double>(r.b);
    for (auto* x : {&tc, &tx, &to, &ts, &tm}) x->x.push_back(b);
    tc.y.push_back(r.t_compute);
    tx.y.push_back(r.t_transfer);
    to.y.push_back(r.t_overlap);
    ts.y.push_back(r.t_serial);
    tm.y.push_back(overlap_step_model(r.t_compute, r.t_transfer, s.cpu_per_byte, r.block_bytes, s.cores));
  }
  p.series = {tc, tx, ts, to, tm};
  if (s.predicted) p.markers.push_back({*s.predicted, "predicted b* = " + fmt("%.0f", *s.predicted), "#333", true});
  p.markers.push_back({s.predicted_peak, "with peak F: " + fmt("%.0f", s.predicted_peak), "#999", true});
  if (s.measured) p.markers.push_back({*s.measured, "measured b* = " + fmt("%.0f", *s.measured), "#d62728", false});
  // Notes under the plot, wrapped at its width: link, rates, summary, machine, command.
  auto add = [&p](const std::string& text) {
    std::string line;
    for (const auto& part : split_summary(text)) {
      if (!line.empty() && line.size() + part.size() > 150) {
        p.notes.push_back(line);
        line.clear();
      }
      line += part;
    }
    if (!line.empty()) p.notes.push_back(line);
  };
  add("link: " + info.link);
  add("F = " + fmt("%.1f", s.flops_peak / 1e9) + " GFLOP/s useful (kernel alone, median of the largest third of b); B = " +
      fmt("%.3f", s.bandwidth / 1e9) + " GB/s per direction (median of the largest two thirds); TCP " +
      fmt("%.2f", s.cpu_per_byte * 1e9) + " CPU s/GB");
  add(summary_text(s));
  add("machine: " + info.machine + "; node 0 on CPU " + info.node_cpus + "; load " + info.load_before + " -> " +
      info.load_after + "; sweep " + fmt("%.0f", info.seconds) + " s");
  add("command: " + info.command);
  return render_svg(p);
}

}  // namespace ringattn::bench::overlap
