// `ringattn bench overlap` — the analysis of a sweep, as pure functions (no I/O, no
// clocks), so the unit tests can feed them synthetic curves.
//
// Per block size b the sweep measures, on one node of the ring:
//   T_c  kernel time per step, alone            T_x  transfer time per step, alone
//   T_s  compute, then transfer (serial)        T_o  the double-buffered step
//   T_f  the kernel's own time inside T_o (slower than T_c when socket copies steal its core)
// and derives F(b) = useful FLOPs / T_c, B(b) = block bytes / T_x and c, the transport's
// CPU seconds per block byte (the I/O thread's CPU time over the bytes it moved).
//
// Crossovers. The seed's model: T_c = w·4b²d/F and T_x = 2b·d_kv·s/B cross at
// b* = d_kv·s·F / (2·w·d·B) (w = useful fraction of the b×b block: 1, or ½ for causal
// under zigzag). Measured crossovers are found where two measured curves meet, with
// log-log linear interpolation between neighbouring sizes (the curves are close to
// power laws, so a straight line in log-log space is the natural interpolant).
//
// The CPU cost of TCP. A node with C cores that moves bytes at rate B spends c·B cores
// on the socket while the transfer runs, so the kernel effectively runs at
// F_eff = F·(1 − c·B/C). The step then takes max(T_x, T_c + c·S/C) (S = block bytes), the
// crossover moves to b*·(1 − c·B/C), and at most a fraction 1 − c·B/C of the transfer
// can ever be hidden.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../../src/cli/stats.hpp"

namespace ringattn::bench::overlap {

// One block size as measured by one rank (medians over the timed steps).
struct StepRow {
  std::string mask = "none";       // "none" or "causal" (causal runs the zigzag layout)
  int rank = 0;
  std::int64_t b = 0;              // tokens per block
  double t_compute = 0, t_transfer = 0, t_serial = 0, t_overlap = 0;
  double t_fold_in_overlap = 0;    // the kernel alone inside the overlapped step
  double useful_flops = 0;         // per step (mean over the steps' sources)
  double block_bytes = 0;          // K and V payload per step and direction
  double io_cpu_per_byte = 0;      // transport CPU s per block byte, transfer-alone phase
  double io_cpu_per_byte_overlap = 0;
  double cpu_share = 0;            // process CPU time / (wall time × cores) in the compute
                                   // phase: below ~0.95 other load took part of the cores
  int reps_compute = 0, reps_transfer = 0, reps_serial = 0, reps_overlap = 0;

  double flops_per_second() const { return t_compute > 0 ? useful_flops / t_compute : 0; }
  double bytes_per_second() const { return t_transfer > 0 ? block_bytes / t_transfer : 0; }
};

// The worker → front line format: "ROW key=value ..." (order free, unknown keys ignored).
std::string to_line(const StepRow& r);
std::optional<StepRow> parse_row_line(const std::string& line);  // nullopt if not a ROW line

// The rows of an overlap.csv as written by csv_row (columns found by their header names).
std::vector<StepRow> parse_csv_rows(const std::string& csv);

// The default sweep: from `lo` to `hi` in steps of about ×√2, each rounded to an even
// number (zigzag cuts a block into two equal chunks). Both ends are included.
std::vector<std::int64_t> sqrt2_ladder(std::int64_t lo, std::int64_t hi);

// Where y1 and y2 (sampled at ascending x) cross, log-log interpolated on the segment
// where ln y1 − ln y2 changes sign (or touches 0). If noisy samples make them cross more
// than once, the crossing with the fewest samples on the wrong side of it (one curve on
// top below it, the other above), so that one disturbed size, small or large, cannot
// move it far. nullopt if they never cross, or if more than a quarter of the samples
// disagree with every crossing (one disturbed sample touching the other curve).
std::optional<double> crossover(const std::vector<double>& x, const std::vector<double>& y1,
                                const std::vector<double>& y2);
// The same crossover, made robust to one noisy sample: a least-squares line through
// ln(y1/y2) against ln x over the samples within a factor `window` of the interpolated
// crossing, and where that line is zero. Exact for power laws; falls back to the
// interpolated value if the line is flat or its zero leaves the window.
std::optional<double> crossover_fit(const std::vector<double>& x, const std::vector<double>& y1,
                                    const std::vector<double>& y2, double window = 3.0);
// How many times they cross (more than one means noise around the crossover).
int crossing_count(const std::vector<double>& x, const std::vector<double>& y1, const std::vector<double>& y2);

// y(x) log-log interpolated between the samples (clamped to the end values outside).
double loglog_at(const std::vector<double>& x, const std::vector<double>& y, double at);

using cli::median;  // src/cli/stats.hpp

// The step time the model with TCP CPU cost predicts.
double overlap_step_model(double t_compute, double t_transfer, double cpu_per_byte, double block_bytes, double cores);

// What a sweep (one mask, one rank) says. Times in seconds, rates in FLOP/s and B/s.
struct SweepSummary {
  std::string mask;
  double useful_fraction = 1;      // w at the largest b
  double flops_peak = 0;           // F: median over the largest third of b (the kernel's plateau)
  double bandwidth = 0;            // B: median over the largest two thirds of b (the link's rate)
  double cpu_per_byte = 0;         // c: median over the largest two thirds of b
  double cores = 1;                // C: cores of one node
  // The model's crossover, b = d_kv·s·F(b) / (2·w·d·B): the measured kernel time T_c(b)
  // against S(b)/B, i.e. the seed's formula with F taken at the block size itself.
  std::optional<double> predicted;
  double predicted_peak = 0;       // the same formula with the plateau F (F at large b)
  std::optional<double> measured;  // T_c = T_x
  int measured_crossings = 0;
  std::optional<double> predicted_tcp;  // T_c + c·S/C = T_x (measured curves, model's steal)
  std::optional<double> measured_tcp;   // T_f (kernel inside the overlap step) = T_x
  double tcp_factor = 1;           // 1 − c·B/C
  // Targets, over the rows on either side of the measured b*.
  int rows_above = 0, rows_below = 0;      // b >= 2·b*, b <= b*/2
  double hidden_median = 0, hidden_min = 0;  // (T_c + T_x − T_o) / T_x above 2·b*
  double overlap_over_compute_median = 0;    // T_o / T_c above 2·b*: median and worst
  double worst_overlap_over_compute = 0;
  double overlap_over_transfer_median = 0;   // T_o / T_x below b*/2: median and worst
  double worst_overlap_over_transfer = 0;
  double model_error_median = 0;             // median |T_o model / T_o − 1| over all rows
  double cpu_share_min = 0;                  // lowest cpu_share of the rows analysed
  int rows_disturbed = 0;                    // rows left out: cpu_share < kMinCpuShare
};

// Rows whose kernel had less than this share of its cores are left out of the analysis.
inline constexpr double kMinCpuShare = 0.9;

// Needs rows of one mask sorted by b (at least two). heads·head_dim = d, kv_heads·head_dim = d_kv.
// backward: the rows measured the backward ring's step (useful FLOPs 10·b²·d per block,
// K/V plus fp32 dK/dV per pass), so w and the plateau's b* follow its formulas.
SweepSummary summarize(const std::vector<StepRow>& rows, std::int64_t d, std::int64_t d_kv, int dtype_bytes,
                       double cores, bool backward = false);

}  // namespace ringattn::bench::overlap
