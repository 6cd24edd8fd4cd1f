// infer — the sampler (sampler.hpp), in float32 throughout as llama2.c's run.c computes it.
#include "sampler.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <cmath>
#include <string>

namespace infer {

Sampler::Sampler(float temperature, float top_p, std::uint64_t seed)
    : temperature_(temperature), top_p_(top_p), state_(seed == 0 ? 1 : seed) {
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw ringattn::InvalidArgument("--temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (!std::isfinite(top_p)) throw ringattn::InvalidArgument("--top-p must be finite");
}

float Sampler::coin() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  const auto bits = static_cast<std::uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  return static_cast<float>(bits >> 8) / 16777216.0f;
}

std::int32_t argmax(std::span<const float> x) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<std::int32_t>(best);
}

std::int32_t Sampler::next(std::span<const float> logits) {
  const auto n = static_cast<std::int32_t>(logits.size());
  if (temperature_ < kMinTemperature) return argmax(logits);
  probs_.assign(logits.begin(), logits.end());
  for (float& x : probs_) x /= temperature_;
  const float most = *std::max_element(probs_.begin(), probs_.end());
  if (!std::isfinite(most)) return argmax(logits);  // logits / T overflowed: its largest is the argmax's
  float sum = 0.0f;
  for (float& x : probs_) {
    x = std::exp(x - most);
    sum += x;
  }
  for (float& x : probs_) x /= sum;
  const float c = coin();
  if (top_p_ <= 0.0f || top_p_ >= 1.0f) {  // multinomial over every token
    float cdf = 0.0f;
    for (std::int32_t i = 0; i < n; ++i) {
      cdf += probs_[static_cast<std::size_t>(i)];
      if (c < cdf) return i;
    }
    return n - 1;  // rounding: the cdf stopped short of 1
  }
  // Nucleus: only tokens at or above (1 - p) / (n - 1) can be in it (a cheap filter),
  // sorted by probability, descending (stable: equal ones in index order).
  const float cutoff = (1.0f - top_p_) / static_cast<float>(n - 1);
  nucleus_.clear();
  for (std::int32_t i = 0; i < n; ++i)
    if (probs_[static_cast<std::size_t>(i)] >= cutoff) nucleus_.emplace_back(probs_[static_cast<std::size_t>(i)], i);
  if (nucleus_.empty()) {  // a p so small that even the likeliest is below the filter: it alone
    return static_cast<std::int32_t>(std::max_element(probs_.begin(), probs_.end()) - probs_.begin());
  }
  std::stable_sort(nucleus_.begin(), nucleus_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  float cumulative = 0.0f;
  std::size_t last = nucleus_.size() - 1;
  for (std::size_t i = 0; i < nucleus_.size(); ++i) {
    cumulative += nucleus_[i].first;
    if (cumulative > top_p_) {
      last = i;
      break;
    }
  }
  const float r = c * cumulative;
  float cdf = 0.0f;
  for (std::size_t i = 0; i <= last; ++i) {
    cdf += nucleus_[i].first;
    if (r < cdf) return nucleus_[i].second;
  }
  return nucleus_[last].second;
}

}  // namespace infer
