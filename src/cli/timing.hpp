// ringattn — timing helpers shared by `ringattn demo` and the benchmarks: warm-up, then repeat until
// a minimum time has passed, and report the median.
#pragma once

#include <chrono>
#include <utility>
#include <vector>

#include "stats.hpp"

namespace ringattn::cli {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs fn() `warmup` times, then at least `min_reps` times and until `min_seconds` of
// timed runs have accumulated (at most `max_reps`). Returns the median seconds.
template <class Fn>
double median_seconds(Fn&& fn, int warmup = 1, int min_reps = 3, double min_seconds = 0.3, int max_reps = 50) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  double total = 0;
  while (static_cast<int>(t.size()) < min_reps || (total < min_seconds && static_cast<int>(t.size()) < max_reps)) {
    const double t0 = now_seconds();
    fn();
    t.push_back(now_seconds() - t0);
    total += t.back();
  }
  return median(std::move(t));
}

}  // namespace ringattn::cli
