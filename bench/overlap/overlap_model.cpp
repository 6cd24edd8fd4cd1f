#include "overlap_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "../../src/plan/cost_model.hpp"

namespace ringattn::bench::overlap {

std::string to_line(const StepRow& r) {
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "ROW mask=%s rank=%d b=%lld t_compute=%.9g t_transfer=%.9g t_serial=%.9g t_overlap=%.9g "
                "t_fold_in_overlap=%.9g useful_flops=%.9g block_bytes=%.9g io_cpu_per_byte=%.9g "
                "io_cpu_per_byte_overlap=%.9g cpu_share=%.4f reps_compute=%d reps_transfer=%d reps_serial=%d reps_overlap=%d",
                r.mask.c_str(), r.rank, static_cast<long long>(r.b), r.t_compute, r.t_transfer, r.t_serial,
                r.t_overlap, r.t_fold_in_overlap, r.useful_flops, r.block_bytes, r.io_cpu_per_byte,
                r.io_cpu_per_byte_overlap, r.cpu_share, r.reps_compute, r.reps_transfer, r.reps_serial, r.reps_overlap);
  return buf;
}

std::optional<StepRow> parse_row_line(const std::string& line) {
  if (line.rfind("ROW ", 0) != 0) return std::nullopt;
  StepRow r;
  std::istringstream in(line.substr(4));
  std::string kv;
  while (in >> kv) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    try {
      if (k == "mask") r.mask = v;
      else if (k == "rank") r.rank = std::stoi(v);
      else if (k == "b") r.b = std::stoll(v);
      else if (k == "t_compute") r.t_compute = std::stod(v);
      else if (k == "t_transfer") r.t_transfer = std::stod(v);
      else if (k == "t_serial") r.t_serial = std::stod(v);
      else if (k == "t_overlap") r.t_overlap = std::stod(v);
      else if (k == "t_fold_in_overlap") r.t_fold_in_overlap = std::stod(v);
      else if (k == "useful_flops") r.useful_flops = std::stod(v);
      else if (k == "block_bytes") r.block_bytes = std::stod(v);
      else if (k == "io_cpu_per_byte") r.io_cpu_per_byte = std::stod(v);
      else if (k == "io_cpu_per_byte_overlap") r.io_cpu_per_byte_overlap = std::stod(v);
      else if (k == "cpu_share") r.cpu_share = std::stod(v);
      else if (k == "reps_compute") r.reps_compute = std::stoi(v);
      else if (k == "reps_transfer") r.reps_transfer = std::stoi(v);
      else if (k == "reps_serial") r.reps_serial = std::stoi(v);
      else if (k == "reps_overlap") r.reps_overlap = std::stoi(v);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (r.b <= 0) return std::nullopt;
  return r;
}

std::vector<StepRow> parse_csv_rows(const std::string& csv) {
  std::istringstream in(csv);
  std::string line;
  std::vector<std::string> names;
  std::vector<StepRow> rows;
  auto cells = [](const std::string& l) {
    std::vector<std::string> out;
    std::istringstream ls(l);
    std::string c;
    while (std::getline(ls, c, ',')) out.push_back(c);
    return out;
  };
  if (!std::getline(in, line)) return rows;
  names = cells(line);
  while (std::getline(in, line)) {
    const auto c = cells(line);
    std::string kv = "ROW";
    for (std::size_t i = 0; i < std::min(c.size(), names.size()); ++i) {
      // CSV names carry units: t_compute_s -> t_compute, io_cpu_s_per_byte -> io_cpu_per_byte.
      std::string k = names[i];
      if (const auto at = k.find("_s_per_byte"); at != std::string::npos) k.replace(at, 11, "_per_byte");
      if (k.size() > 2 && k.compare(k.size() - 2, 2, "_s") == 0) k.resize(k.size() - 2);
      kv += " " + k + "=" + c[i];
    }
    if (auto r = parse_row_line(kv)) rows.push_back(*r);
  }
  return rows;
}

std::vector<std::int64_t> sqrt2_ladder(std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> out;
  auto even = [](double v) { return std::max<std::int64_t>(2, 2 * std::llround(v / 2)); };
  for (int k = 0;; ++k) {
    const double v = static_cast<double>(lo) * std::pow(2.0, k / 2.0);
    if (v > static_cast<double>(hi) * 1.01) break;
    const std::int64_t e = even(v);
    if (out.empty() || e > out.back()) out.push_back(e);
  }
  if (out.empty() || out.back() < even(static_cast<double>(hi))) out.push_back(even(static_cast<double>(hi)));
  return out;
}

namespace {

// Every crossing of y1 and y2, in ascending x.
std::vector<double> crossings(const std::vector<double>& x, const std::vector<double>& y1,
                              const std::vector<double>& y2) {
  const std::size_t n = std::min({x.size(), y1.size(), y2.size()});
  std::vector<double> out;
  std::optional<double> prev_d, prev_lx;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(x[i] > 0 && y1[i] > 0 && y2[i] > 0)) continue;  // a missing sample: skip it
    const double d = std::log(y1[i]) - std::log(y2[i]), lx = std::log(x[i]);
    if (d == 0) {
      out.push_back(x[i]);
    } else if (prev_d && *prev_d != 0 && (*prev_d < 0) != (d < 0)) {
      const double t = *prev_d / (*prev_d - d);
      out.push_back(std::exp(*prev_lx + t * (lx - *prev_lx)));
    }
    prev_d = d;
    prev_lx = lx;
  }
  return out;
}

}  // namespace

std::optional<double> crossover(const std::vector<double>& x, const std::vector<double>& y1,
                                const std::vector<double>& y2) {
  const auto c = crossings(x, y1, y2);
  if (c.empty()) return std::nullopt;
  // Score each crossing by the samples on the wrong side of it (one curve should be on
  // top below it and the other above); the fewest wins, the first on a tie.
  std::size_t best = 0, best_score = ~std::size_t{0}, used = 0;
  const std::size_t n = std::min({x.size(), y1.size(), y2.size()});
  for (std::size_t i = 0; i < n; ++i) used += x[i] > 0 && y1[i] > 0 && y2[i] > 0;
  for (std::size_t k = 0; k < c.size(); ++k) {
    std::size_t v = 0, w = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!(x[i] > 0 && y1[i] > 0 && y2[i] > 0) || y1[i] == y2[i]) continue;
      const bool above = y1[i] > y2[i];
      if (x[i] < c[k]) (above ? w : v) += 1;
      else if (x[i] > c[k]) (above ? v : w) += 1;
    }
    if (std::min(v, w) < best_score) {
      best_score = std::min(v, w);
      best = k;
    }
  }
  // Curves that only touch at a disturbed sample, on the wrong side for over a quarter
  // of the samples whichever crossing is taken, do not cross.
  if (4 * best_score > used) return std::nullopt;
  return c[best];
}

std::optional<double> crossover_fit(const std::vector<double>& x, const std::vector<double>& y1,
                                    const std::vector<double>& y2, double window) {
  const auto guess = crossover(x, y1, y2);
  if (!guess) return std::nullopt;
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < std::min({x.size(), y1.size(), y2.size()}); ++i) {
    if (!(x[i] > 0 && y1[i] > 0 && y2[i] > 0) || x[i] < *guess / window || x[i] > *guess * window) continue;
    const double lx = std::log(x[i]), d = std::log(y1[i]) - std::log(y2[i]);
    n += 1;
    sx += lx;
    sy += d;
    sxx += lx * lx;
    sxy += lx * d;
  }
  const double den = n * sxx - sx * sx;
  if (n < 3 || std::abs(den) < 1e-12) return guess;
  const double slope = (n * sxy - sx * sy) / den, icpt = (sy - slope * sx) / n;
  if (std::abs(slope) < 1e-9) return guess;
  const double root = std::exp(-icpt / slope);
  return root >= *guess / window && root <= *guess * window ? root : *guess;
}

int crossing_count(const std::vector<double>& x, const std::vector<double>& y1, const std::vector<double>& y2) {
  return static_cast<int>(crossings(x, y1, y2).size());
}

double loglog_at(const std::vector<double>& x, const std::vector<double>& y, double at) {
  const std::size_t n = std::min(x.size(), y.size());
  if (n == 0) return 0;
  if (at <= x.front()) return y.front();
  if (at >= x[n - 1]) return y[n - 1];
  std::size_t i = 1;
  while (x[i] < at) ++i;
  const double t = (std::log(at) - std::log(x[i - 1])) / (std::log(x[i]) - std::log(x[i - 1]));
  return std::exp(std::log(y[i - 1]) + t * (std::log(y[i]) - std::log(y[i - 1])));
}

double overlap_step_model(double t_compute, double t_transfer, double cpu_per_byte, double block_bytes, double cores) {
  return std::max(t_transfer, t_compute + cpu_per_byte * block_bytes / cores);
}

SweepSummary summarize(const std::vector<StepRow>& all_rows, std::int64_t d, std::int64_t d_kv, int dtype_bytes,
                       double cores, bool backward) {
  SweepSummary s;
  // A size whose kernel got less than its cores (another process ran on them) measured
  // the machine's load, not the ring: it stays in the outputs but not in the analysis.
  std::vector<StepRow> rows;
  for (const auto& r : all_rows) {
    if (r.cpu_share > 0 && r.cpu_share < kMinCpuShare) ++s.rows_disturbed;
    else rows.push_back(r);
  }
  if (rows.size() < 2) rows = all_rows;
  if (rows.empty()) return s;
  s.mask = rows.front().mask;
  s.cores = cores;
  // F's plateau: the median over the largest third of the sweep (at least three sizes).
  // B and c: the median over the largest two thirds, where transfers last long enough
  // that per-frame latency no longer counts; many sizes, so that a few disturbed ones
  // (a shared machine) do not set them.
  const std::size_t n = rows.size(), top = std::min(n, std::max<std::size_t>(3, n / 3)),
                    wide = std::min(n, std::max<std::size_t>(3, 2 * n / 3));
  std::vector<double> f_top, b_top, c_top;
  for (std::size_t i = n - top; i < n; ++i) f_top.push_back(rows[i].flops_per_second());
  for (std::size_t i = n - wide; i < n; ++i) {
    b_top.push_back(rows[i].bytes_per_second());
    c_top.push_back(rows[i].io_cpu_per_byte);
  }
  s.flops_peak = cli::median(f_top);
  s.bandwidth = cli::median(b_top);
  s.cpu_per_byte = cli::median(c_top);
  const auto& big = rows.back();
  const double bb = static_cast<double>(big.b);
  s.useful_fraction = big.useful_flops / ((backward ? 10.0 : 4.0) * bb * bb * static_cast<double>(d));
  if (s.useful_fraction > 0 && s.bandwidth > 0)
    s.predicted_peak =
        backward ? plan::min_block_for_backward_overlap(d, d_kv, dtype_bytes, s.flops_peak / s.useful_fraction, s.bandwidth)
                 : plan::min_block_for_overlap(d, d_kv, dtype_bytes, s.flops_peak / s.useful_fraction, s.bandwidth);
  s.tcp_factor = 1 - s.cpu_per_byte * s.bandwidth / cores;

  std::vector<double> x, tc, tx, tx_model, tc_tcp, tf;
  for (const auto& r : rows) {
    x.push_back(static_cast<double>(r.b));
    tc.push_back(r.t_compute);
    tx.push_back(r.t_transfer);
    tx_model.push_back(s.bandwidth > 0 ? r.block_bytes / s.bandwidth : 0);
    tc_tcp.push_back(r.t_compute + s.cpu_per_byte * r.block_bytes / cores);
    tf.push_back(r.t_fold_in_overlap);
  }
  s.predicted = crossover_fit(x, tx_model, tc);
  s.measured = crossover_fit(x, tx, tc);
  s.measured_crossings = crossing_count(x, tx, tc);
  s.predicted_tcp = crossover_fit(x, tx, tc_tcp);
  s.measured_tcp = crossover_fit(x, tx, tf);

  // Which side of the crossover a row is on: the measured one, else the model's.
  const double star = s.measured.value_or(s.predicted.value_or(s.predicted_peak));
  std::vector<double> hidden, model_err, o_over_c, o_over_x;
  for (const auto& r : rows) {
    const double tm = overlap_step_model(r.t_compute, r.t_transfer, s.cpu_per_byte, r.block_bytes, cores);
    if (r.t_overlap > 0) model_err.push_back(std::abs(tm / r.t_overlap - 1));
    const double b = static_cast<double>(r.b);
    if (b >= 2 * star) {
      hidden.push_back((r.t_compute + r.t_transfer - r.t_overlap) / r.t_transfer);
      o_over_c.push_back(r.t_overlap / r.t_compute);
    } else if (b <= star / 2) {
      o_over_x.push_back(r.t_overlap / r.t_transfer);
    }
  }
  s.rows_above = static_cast<int>(hidden.size());
  s.rows_below = static_cast<int>(o_over_x.size());
  if (!hidden.empty()) {
    s.hidden_median = cli::median(hidden);
    s.hidden_min = *std::min_element(hidden.begin(), hidden.end());
    s.overlap_over_compute_median = cli::median(o_over_c);
    s.worst_overlap_over_compute = *std::max_element(o_over_c.begin(), o_over_c.end());
  }
  if (!o_over_x.empty()) {
    s.overlap_over_transfer_median = cli::median(o_over_x);
    s.worst_overlap_over_transfer = *std::max_element(o_over_x.begin(), o_over_x.end());
  }
  s.model_error_median = cli::median(model_err);
  s.cpu_share_min = 1;
  for (const auto& r : rows) s.cpu_share_min = std::min(s.cpu_share_min, r.cpu_share);
  return s;
}

}  // namespace ringattn::bench::overlap
