// The analysis behind `ringattn bench overlap`, on synthetic curves whose crossovers are
// known in closed form: the interpolation, the model with the CPU cost of TCP, the
// summary's b* and targets, and the worker → front row format.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "bench/overlap/overlap_model.hpp"

using namespace ringattn::bench::overlap;

namespace {

std::vector<double> tx_above(std::vector<double> v) {
  for (auto& e : v) e *= 2;
  return v;
}

std::vector<double> as_double(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

// A ring step of the seed's model at block b: d = d_kv = 4096, bf16, F and B constant,
// `frac` of the block useful (½ for causal zigzag), c CPU s per byte on one core.
StepRow model_row(std::int64_t b, double F, double B, double c, double frac = 1.0) {
  const double d = 4096, bb = static_cast<double>(b);
  StepRow r;
  r.mask = frac < 1 ? "causal" : "none";
  r.b = b;
  r.useful_flops = frac * 4 * bb * bb * d;
  r.block_bytes = 2 * bb * d * 2;
  r.t_compute = r.useful_flops / F;
  r.t_transfer = r.block_bytes / B;
  r.t_overlap = overlap_step_model(r.t_compute, r.t_transfer, c, r.block_bytes, 1);
  r.t_serial = r.t_compute + r.t_transfer;
  r.t_fold_in_overlap = r.t_compute + c * r.block_bytes;
  r.io_cpu_per_byte = c;
  r.cpu_share = 1;
  return r;
}

}  // namespace

TEST_CASE("the default sweep: 32 to 8192 in even steps of about sqrt(2)") {
  const auto l = sqrt2_ladder(32, 8192);
  REQUIRE(l.size() == 17);
  CHECK(l.front() == 32);
  CHECK(l.back() == 8192);
  for (std::size_t i = 0; i < l.size(); ++i) {
    CHECK(l[i] % 2 == 0);
    if (i > 0) CHECK(static_cast<double>(l[i]) / static_cast<double>(l[i - 1]) == doctest::Approx(std::sqrt(2.0)).epsilon(0.03));
  }
  CHECK(sqrt2_ladder(100, 100) == std::vector<std::int64_t>{100});
  CHECK(sqrt2_ladder(64, 200).back() == 200);  // the upper end is always measured
}

TEST_CASE("crossover of two power laws is exact under log-log interpolation") {
  // T_x = 2 ms · (b/100), T_c = 1 ms · (b/100)²: they meet at b = 200, between samples.
  const auto x = as_double(sqrt2_ladder(32, 8192));
  std::vector<double> tx, tc;
  for (double b : x) {
    tx.push_back(2e-3 * b / 100);
    tc.push_back(1e-3 * (b / 100) * (b / 100));
  }
  const auto c = crossover(x, tx, tc);
  REQUIRE(c.has_value());
  CHECK(*c == doctest::Approx(200).epsilon(1e-9));
  // The order of the two curves does not matter.
  CHECK(*crossover(x, tc, tx) == doctest::Approx(200).epsilon(1e-9));
}

TEST_CASE("crossover of curves that are not power laws lands near the true root") {
  // T_c = a·b² + t0 (a fixed per-call cost), T_x = k·b. Root of a·b² − k·b + t0 = 0,
  // the larger one; log-log interpolation between sqrt(2)-spaced samples is within 2 %.
  const double a = 1e-7, t0 = 2e-4, k = 1e-4;
  const double root = (k + std::sqrt(k * k - 4 * a * t0)) / (2 * a);
  const auto x = as_double(sqrt2_ladder(512, 4096));
  std::vector<double> tc, tx;
  for (double b : x) {
    tc.push_back(a * b * b + t0);
    tx.push_back(k * b);
  }
  REQUIRE(crossover(x, tx, tc).has_value());
  CHECK(*crossover(x, tx, tc) == doctest::Approx(root).epsilon(0.02));
}

TEST_CASE("crossover: none, at a sample, and skipping missing samples") {
  const std::vector<double> x = {10, 20, 40, 80};
  CHECK_FALSE(crossover(x, {1, 2, 4, 8}, {2, 4, 8, 16}).has_value());  // parallel, never meet
  CHECK(*crossover(x, {1, 2, 4, 8}, {4, 2, 1, 0.5}) == doctest::Approx(20));  // equal at x = 20
  // A zero (unmeasured) sample is skipped: the crossing is found across the gap.
  const auto c = crossover(x, {1, 0, 4, 8}, {4, 3, 2, 1});
  REQUIRE(c.has_value());
  CHECK(*c > 10);
  CHECK(*c < 40);
}

TEST_CASE("noisy samples that cross more than once: the crossing most samples agree with") {
  // T_x sits below T_c at x = 10 only (an outlier); the real crossing is between 40 and 80.
  const std::vector<double> x = {10, 20, 40, 80, 160};
  const std::vector<double> tx = {1, 9, 4, 8, 16}, tc = {2, 4, 3, 12, 48};
  CHECK(crossing_count(x, tx, tc) == 2);
  REQUIRE(crossover(x, tx, tc).has_value());
  CHECK(*crossover(x, tx, tc) > 40);
  CHECK(*crossover(x, tx, tc) < 80);
  // A stalled transfer at a large size (x = 160) adds a late crossing; it is not chosen.
  const std::vector<double> tx2 = {4, 8, 16, 32, 640, 128}, tc2 = {1, 4, 16, 64, 256, 1024};
  const std::vector<double> x2 = {10, 20, 40, 80, 160, 320};
  CHECK(crossing_count(x2, tx2, tc2) == 3);
  CHECK(*crossover(x2, tx2, tc2) == doctest::Approx(40));
  // One disturbed transfer that pokes above a compute curve it otherwise stays under is
  // not a crossover.
  const std::vector<double> x3 = {10, 20, 40, 80, 160, 320, 640, 1280};
  const std::vector<double> tx3 = {1, 2, 4, 80, 16, 32, 64, 128}, tc3 = {3, 6, 12, 24, 48, 96, 192, 384};
  CHECK(crossing_count(x3, tx3, tc3) == 2);
  CHECK_FALSE(crossover(x3, tx3, tc3).has_value());
}

TEST_CASE("the fitted crossover: exact for power laws, robust to one noisy sample") {
  const auto x = as_double(sqrt2_ladder(32, 8192));
  std::vector<double> tx, tc;
  for (double b : x) {
    tx.push_back(2e-3 * b / 100);
    tc.push_back(1e-3 * (b / 100) * (b / 100));
  }
  CHECK(*crossover_fit(x, tx, tc) == doctest::Approx(200).epsilon(1e-9));
  // T_c 30 % too slow at one sample next to the crossing (another process took the
  // core): interpolation moves to 181, the fit stays within 5 % of 200.
  std::vector<double> noisy = tc;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] == 182) noisy[i] *= 1.3;
  REQUIRE(crossover(x, tx, noisy).has_value());
  CHECK(std::abs(*crossover(x, tx, noisy) / 200 - 1) > 0.06);
  CHECK(*crossover_fit(x, tx, noisy) == doctest::Approx(200).epsilon(0.05));
  CHECK_FALSE(crossover_fit(x, tx, tx_above(tx)).has_value());
}

TEST_CASE("log-log interpolation reproduces a power law and clamps outside the samples") {
  const std::vector<double> x = {10, 100, 1000}, y = {1, 100, 10000};  // y = x²/100
  CHECK(loglog_at(x, y, 31.6227766) == doctest::Approx(10).epsilon(1e-6));
  CHECK(loglog_at(x, y, 5) == doctest::Approx(1));
  CHECK(loglog_at(x, y, 5000) == doctest::Approx(10000));
}

TEST_CASE("the step model: the slower of the wire and the kernel plus stolen cycles") {
  CHECK(overlap_step_model(1.0, 2.0, 1e-9, 1e8, 1) == doctest::Approx(2.0));    // wire-bound
  CHECK(overlap_step_model(1.0, 0.5, 1e-9, 1e8, 1) == doctest::Approx(1.1));    // 0.1 s of copies
  CHECK(overlap_step_model(1.0, 0.5, 1e-9, 1e8, 4) == doctest::Approx(1.025));  // spread over 4 cores
}

TEST_CASE("summary of a sweep that follows the seed's model exactly") {
  // F = 100 GFLOP/s, B = 1 GB/s, d_kv = d, bf16: b* = d_kv·s·F/(2·d·B) = F/B = 100 tokens.
  const double F = 1e11, B = 1e9, c = 1e-10;
  std::vector<StepRow> rows;
  for (auto b : sqrt2_ladder(32, 1024)) rows.push_back(model_row(b, F, B, c));
  const SweepSummary s = summarize(rows, 4096, 4096, 2, 1);
  CHECK(s.flops_peak == doctest::Approx(F));
  CHECK(s.bandwidth == doctest::Approx(B));
  CHECK(s.cpu_per_byte == doctest::Approx(c));
  CHECK(s.predicted_peak == doctest::Approx(100));
  REQUIRE(s.predicted.has_value());
  REQUIRE(s.measured.has_value());
  CHECK(*s.predicted == doctest::Approx(100).epsilon(1e-9));
  CHECK(*s.measured == doctest::Approx(100).epsilon(1e-9));
  // The socket takes c·B = 10 % of the core while bytes move: b* moves to 90 (T_c + c·S
  // is not a power law, so the fitted crossing is within 3 %, not exact).
  CHECK(s.tcp_factor == doctest::Approx(0.9));
  REQUIRE(s.predicted_tcp.has_value());
  CHECK(*s.predicted_tcp == doctest::Approx(90).epsilon(0.03));
  CHECK(*s.measured_tcp == doctest::Approx(90).epsilon(0.03));
  // Above 2·b* the step is T_c + c·S: 90 % of the transfer hidden, and T_o/T_c =
  // 1 + c·F/b, worst at the smallest such b of the sweep, 256.
  CHECK(s.rows_above == 5);
  CHECK(s.hidden_median == doctest::Approx(0.9));
  CHECK(s.hidden_min == doctest::Approx(0.9));
  CHECK(s.worst_overlap_over_compute == doctest::Approx(1 + 10.0 / 256).epsilon(1e-9));
  CHECK(s.overlap_over_compute_median == doctest::Approx(1 + 10.0 / 512).epsilon(1e-9));
  CHECK(s.rows_below > 0);
  CHECK(s.worst_overlap_over_transfer == doctest::Approx(1.0));
  CHECK(s.overlap_over_transfer_median == doctest::Approx(1.0));
  CHECK(s.model_error_median == doctest::Approx(0).epsilon(1e-12));
}

TEST_CASE("a size whose kernel lost its core to other load is left out") {
  std::vector<StepRow> rows;
  for (auto b : sqrt2_ladder(32, 1024)) rows.push_back(model_row(b, 1e11, 1e9, 0));
  rows[5].t_compute *= 3;  // b = 182: another process took two thirds of the core
  rows[5].cpu_share = 0.34;
  const SweepSummary s = summarize(rows, 4096, 4096, 2, 1);
  CHECK(s.rows_disturbed == 1);
  CHECK(*s.measured == doctest::Approx(100).epsilon(1e-9));
}

TEST_CASE("causal zigzag: half the useful work per step, so b* doubles") {
  const double F = 1e11, B = 1e9;
  std::vector<StepRow> rows;
  for (auto b : sqrt2_ladder(32, 2048)) rows.push_back(model_row(b, F, B, 0, 0.5));
  const SweepSummary s = summarize(rows, 4096, 4096, 2, 1);
  CHECK(s.useful_fraction == doctest::Approx(0.5));
  CHECK(s.predicted_peak == doctest::Approx(200));
  REQUIRE(s.measured.has_value());
  CHECK(*s.measured == doctest::Approx(200).epsilon(1e-9));
}

TEST_CASE("GQA shrinks the transfer and b* with it") {
  // 8 of 32 KV heads: d_kv = d/4, so b* = F/(4B) = 25 for F/B = 100.
  std::vector<StepRow> rows;
  for (auto b : sqrt2_ladder(8, 256)) {
    StepRow r = model_row(b, 1e11, 1e9, 0);
    r.block_bytes /= 4;
    r.t_transfer /= 4;
    rows.push_back(r);
  }
  const SweepSummary s = summarize(rows, 4096, 1024, 2, 1);
  CHECK(s.predicted_peak == doctest::Approx(25));
  CHECK(*s.measured == doctest::Approx(25).epsilon(1e-9));
}

TEST_CASE("a row survives the worker-to-front line format") {
  StepRow r = model_row(362, 2e11, 5e8, 6e-10, 0.5);
  r.rank = 1;
  r.io_cpu_per_byte_overlap = 7e-10;
  r.cpu_share = 0.987;
  r.reps_compute = 3;
  r.reps_transfer = 40;
  r.reps_serial = 5;
  r.reps_overlap = 6;
  const auto back = parse_row_line(to_line(r));
  REQUIRE(back.has_value());
  CHECK(back->mask == "causal");
  CHECK(back->rank == 1);
  CHECK(back->b == 362);
  CHECK(back->t_compute == doctest::Approx(r.t_compute).epsilon(1e-8));
  CHECK(back->t_transfer == doctest::Approx(r.t_transfer).epsilon(1e-8));
  CHECK(back->t_overlap == doctest::Approx(r.t_overlap).epsilon(1e-8));
  CHECK(back->useful_flops == doctest::Approx(r.useful_flops).epsilon(1e-8));
  CHECK(back->io_cpu_per_byte_overlap == doctest::Approx(7e-10).epsilon(1e-8));
  CHECK(back->cpu_share == doctest::Approx(0.987));
  CHECK(back->reps_transfer == 40);
  CHECK_FALSE(parse_row_line("PORT 1234").has_value());
  // The CSV columns a finished sweep is re-analysed from (bench overlap --replot).
  const auto rows = parse_csv_rows(
      "mask,layout,rank,b,t_compute_s,t_transfer_s,io_cpu_s_per_byte,io_cpu_s_per_byte_overlap,cpu_share\n"
      "causal,zigzag,0,512,0.25,0.125,5e-10,6e-10,0.99\n");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].mask == "causal");
  CHECK(rows[0].b == 512);
  CHECK(rows[0].t_compute == doctest::Approx(0.25));
  CHECK(rows[0].t_transfer == doctest::Approx(0.125));
  CHECK(rows[0].io_cpu_per_byte == doctest::Approx(5e-10));
  CHECK(rows[0].io_cpu_per_byte_overlap == doctest::Approx(6e-10));
  CHECK(rows[0].cpu_share == doctest::Approx(0.99));
  CHECK_FALSE(parse_row_line("ROW b=abc").has_value());
}
