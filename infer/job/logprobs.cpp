// infer — log probabilities of a logits row (logprobs.hpp).
#include "logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace infer {

TokenLogprobs logprobs_of(std::span<const float> row, std::int32_t token, int top) {
  double max = -std::numeric_limits<double>::infinity();
  for (const float x : row) max = std::max(max, static_cast<double>(x));
  double sum = 0;
  for (const float x : row) sum += std::exp(static_cast<double>(x) - max);
  const double lse = max + std::log(sum);
  TokenLogprobs out;
  out.logprob = static_cast<double>(row[static_cast<std::size_t>(token)]) - lse;
  const auto k = static_cast<std::size_t>(std::clamp(top, 0, static_cast<int>(std::min<std::size_t>(row.size(), 20))));
  if (k == 0) return out;
  std::vector<std::int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](std::int32_t a, std::int32_t b) {
    const float x = row[static_cast<std::size_t>(a)], y = row[static_cast<std::size_t>(b)];
    return x > y || (x == y && a < b);
  });
  for (std::size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], static_cast<double>(row[static_cast<std::size_t>(ids[i])]) - lse);
  return out;
}

}  // namespace infer
