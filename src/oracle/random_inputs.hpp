// ringattn kernels — seeded unit-scale test inputs, shared by the tests, the demo,
// `verify` and the benchmarks so they all exercise the kernel on the same kind of data.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ringattn/block_attention.hpp"

namespace ringattn::oracle {

// n samples of N(0, 1) from a seeded generator: the same seed gives the same tensor.
inline std::vector<float> random_normal(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Rounds x to bf16 in place (so a float64 reference sees exactly what a bf16 kernel
// sees) and returns the bf16 bits.
inline std::vector<std::uint16_t> round_to_bf16(std::vector<float>& x) {
  std::vector<std::uint16_t> h(x.size());
  to_bf16(x.data(), h.data(), static_cast<std::int64_t>(x.size()));
  from_bf16(h.data(), x.data(), static_cast<std::int64_t>(x.size()));
  return h;
}

// A mixed batch of prompts as cu_seqlens: lengths from a bounded Pareto distribution on
// [lo, hi] (shape 0.8: most prompts short, a few thousands of tokens), seeded.
inline std::vector<std::int64_t> mixed_batch_cu_seqlens(int prompts, std::int64_t lo, std::int64_t hi,
                                                        std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double a = 0.8, l = static_cast<double>(lo), h = static_cast<double>(hi);
  std::vector<std::int64_t> cu = {0};
  for (int i = 0; i < prompts; ++i) {
    const double x = u(rng);
    const double len =
        std::pow(-(x * std::pow(h, a) - x * std::pow(l, a) - std::pow(h, a)) / (std::pow(h, a) * std::pow(l, a)), -1.0 / a);
    cu.push_back(cu.back() + std::clamp<std::int64_t>(std::llround(len), lo, hi));
  }
  return cu;
}

}  // namespace ringattn::oracle
