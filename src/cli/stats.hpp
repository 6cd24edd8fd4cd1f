// ringattn — the statistics `ringattn demo` and every benchmark report: median and percentile.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ringattn::cli {

// The middle value (the mean of the two middle ones for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The value at fraction q (0..1) of the sorted samples, nearest rank below; 0 for none.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace ringattn::cli
