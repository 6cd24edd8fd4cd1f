// `ringattn bench overlap` — what the sweep writes: CSV, JSON lines, a one-line summary
// per mask and an SVG plot per mask. Every output names the link it was measured on,
// the machine, its load and the command, so a figure can be traced to its run.
#pragma once

#include <string>
#include <vector>

#include "overlap_model.hpp"
#include "overlap_worker.hpp"

namespace ringattn::bench::overlap {

struct RunInfo {
  std::string link;          // e.g. "loopback 127.0.0.1, unshaped" or the testbed's label
  std::string machine;       // CPU model and count
  std::string command;       // the command line that made the run
  std::string node_cpus;     // rank 0's CPUs
  std::string load_before, load_after;  // /proc/loadavg, 1-minute figures
  double seconds = 0;        // wall time of the whole sweep
};

// Targets of issue 4, checked against a summary.
struct TargetCheck {
  bool ratio_ok = false;      // measured / predicted b* in [0.8, 1.25]
  bool above_ok = false;      // T_o <= 1.1 T_c above 2 b* (median over those sizes; vacuous if none)
  bool below_ok = false;      // T_o <= 1.1 T_x below b*/2 (median over those sizes; vacuous if none)
};
TargetCheck check_targets(const SweepSummary& s);

std::string csv_header();
std::string csv_row(const StepRow& r, const SweepSummary& s);
std::string row_json(const StepRow& r, const SweepSummary& s, const SweepSpec& spec, const RunInfo& info);
std::string summary_json(const SweepSummary& s, const SweepSpec& spec, const RunInfo& info);
std::string summary_text(const SweepSummary& s);
std::string plot_svg(const std::vector<StepRow>& rows, const SweepSummary& s, const SweepSpec& spec,
                     const RunInfo& info);

}  // namespace ringattn::bench::overlap
