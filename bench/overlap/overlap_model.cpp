#include "bench/overlap/overlap_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "src/plan/cost_model.hpp"

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

std::optional<double> crossover(const std::vector<double>& x, const std::vector<double>& y1,
                                const std::vector<double>& y2) {
  const std::size_t n = std::min({x.size(), y1.size(), y2.size()});
  std::optional<double> prev_d, prev_lx;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(x[i] > 0 && y1[i] > 0 && y2[i] > 0)) continue;  // a missing sample: skip it
    const double d = std::log(y1[i]) - std::log(y2[i]), lx = std::log(x[i]);
    if (d == 0) return x[i];
    if (prev_d && (*prev_d < 0) != (d < 0)) {
      const double t = *prev_d / (*prev_d - d);
      return std::exp(*prev_lx + t * (lx - *prev_lx));
    }
    prev_d = d;
    prev_lx = lx;
  }
  return std::nullopt;
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

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double overlap_step_model(double t_compute, double t_transfer, double cpu_per_byte, double block_bytes, double cores) {
  return std::max(t_transfer, t_compute + cpu_per_byte * block_bytes / cores);
}

SweepSummary summarize(const std::vector<StepRow>& rows, std::int64_t d, std::int64_t d_kv, int dtype_bytes,
                       double cores) {
  SweepSummary s;
  if (rows.empty()) return s;
  s.mask = rows.front().mask;
  s.cores = cores;
  const std::size_t n = rows.size(), top = std::min<std::size_t>(3, n);
  std::vector<double> f_top, b_top, c_top;
  for (std::size_t i = n - top; i < n; ++i) {
    f_top.push_back(rows[i].flops_per_second());
    b_top.push_back(rows[i].bytes_per_second());
    c_top.push_back(rows[i].io_cpu_per_byte);
  }
  s.flops_peak = median(f_top);
  s.bandwidth = median(b_top);
  s.cpu_per_byte = median(c_top);
  const auto& big = rows.back();
  const double bb = static_cast<double>(big.b);
  s.useful_fraction = big.useful_flops / (4.0 * bb * bb * static_cast<double>(d));
  if (s.useful_fraction > 0 && s.bandwidth > 0)
    s.predicted_peak = plan::min_block_for_overlap(d, d_kv, dtype_bytes, s.flops_peak / s.useful_fraction,
                                                      s.bandwidth);
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
  s.predicted = crossover(x, tx_model, tc);
  s.measured = crossover(x, tx, tc);
  s.predicted_tcp = crossover(x, tx, tc_tcp);
  s.measured_tcp = crossover(x, tx, tf);

  // Which side of the crossover a row is on: the measured one, else the model's.
  const double star = s.measured.value_or(s.predicted.value_or(s.predicted_peak));
  std::vector<double> hidden, model_err;
  for (const auto& r : rows) {
    const double tm = overlap_step_model(r.t_compute, r.t_transfer, s.cpu_per_byte, r.block_bytes, cores);
    if (r.t_overlap > 0) model_err.push_back(std::abs(tm / r.t_overlap - 1));
    const double b = static_cast<double>(r.b);
    if (b >= 2 * star) {
      ++s.rows_above;
      hidden.push_back((r.t_compute + r.t_transfer - r.t_overlap) / r.t_transfer);
      s.worst_overlap_over_compute = std::max(s.worst_overlap_over_compute, r.t_overlap / r.t_compute);
    } else if (b <= star / 2) {
      ++s.rows_below;
      s.worst_overlap_over_transfer = std::max(s.worst_overlap_over_transfer, r.t_overlap / r.t_transfer);
    }
  }
  if (!hidden.empty()) {
    s.hidden_median = median(hidden);
    s.hidden_min = *std::min_element(hidden.begin(), hidden.end());
  }
  s.model_error_median = median(model_err);
  s.cpu_share_min = 1;
  for (const auto& r : rows) s.cpu_share_min = std::min(s.cpu_share_min, r.cpu_share);
  return s;
}

}  // namespace ringattn::bench::overlap
