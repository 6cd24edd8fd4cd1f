// ringattn serve — the daemon's metrics, rendered in the Prometheus text format (0.0.4).
//
// A small registry of our own instead of prometheus-cpp: the daemon has a handful of
// counters, gauges and histograms, and serving them from the same Asio code as the rest
// (http_server.hpp: bounded requests, deadlines) costs less than a second HTTP stack
// with its own thread pool. Thread-safe: the ring thread records, the HTTP thread renders.
//
//   Metrics m;
//   m.describe("ringattn_jobs_total", Metrics::Type::counter, "jobs finished, by result");
//   m.add("ringattn_jobs_total", {{"result", "ok"}});
//   m.describe_histogram("ringattn_job_seconds", "job time", {0.01, 0.1, 1, 10});
//   m.observe("ringattn_job_seconds", {}, 0.25);
//   std::string text = m.render();
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ringattn::serve {

using Labels = std::vector<std::pair<std::string, std::string>>;  // name, value

class Metrics {
 public:
  enum class Type { counter, gauge, histogram };

  Metrics();
  ~Metrics();  // out of line: Family is complete only in metrics.cpp
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Declare every metric once before recording it (recording an undeclared name throws
  // std::logic_error: a typo must not silently make a new series).
  void describe(const std::string& name, Type type, const std::string& help);
  void describe_histogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  void add(const std::string& name, const Labels& labels = {}, double value = 1);  // counter
  void set(const std::string& name, const Labels& labels, double value);           // gauge
  void observe(const std::string& name, const Labels& labels, double value);       // histogram

  // The exposition: # HELP and # TYPE per metric, series in a stable order, label values
  // escaped (\\, \", \n), histograms as cumulative _bucket{le=...}, _sum and _count.
  std::string render() const;

  // A counter's or gauge's value as render() would print it, for the daemon's own pages
  // (web_page.hpp): one series (0 while never recorded), or the sum of all its series.
  // nullopt for a name never declared (a metric this build does not have) or a histogram.
  std::optional<double> value(const std::string& name, const Labels& labels = {}) const;
  std::optional<double> sum(const std::string& name) const;

 private:
  struct Series;
  struct Family;
  // The series `labels` of the declared metric `name` of `type`, created at zero on first
  // use; throws std::logic_error otherwise. Called with mu_ held.
  Series& series_locked(const std::string& name, const Labels& labels, Type type);
  mutable std::mutex mu_;
  std::map<std::string, Family*> index_;
  std::vector<std::unique_ptr<Family>> families_;
};

}  // namespace ringattn::serve
