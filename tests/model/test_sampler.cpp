// The sampler (infer/job/sampler.hpp) on its own: greedy picks the first of the largest;
// a seed gives one sequence of coins, in [0, 1); multinomial and nucleus sampling follow the
// distribution and respect p; bad settings are refused. (Its agreement with llama2.c's
// draws is in test_llama2c.cpp, on the real model.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "ringattn/error.hpp"
#include "job/sampler.hpp"

using infer::Sampler;

TEST_CASE("sampler: greedy is the first of the largest logits, whatever the seed") {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  Sampler a(0, 0.9f, 1), b(0, 0.5f, 99);
  CHECK(a.next(logits) == 1);
  CHECK(b.next(logits) == 1);
  CHECK(infer::argmax(logits) == 1);
}

TEST_CASE("sampler: one seed is one sequence of coins in [0, 1); another seed another") {
  Sampler a(1, 0.9f, 133742), b(1, 0.9f, 133742), c(1, 0.9f, 7), zero(1, 0.9f, 0);
  std::vector<float> ca, cc;
  for (int i = 0; i < 1000; ++i) {
    const float x = a.coin();
    CHECK(x == b.coin());
    CHECK(x >= 0.0f);
    CHECK(x < 1.0f);
    ca.push_back(x);
    cc.push_back(c.coin());
    CHECK(zero.coin() < 1.0f);  // seed 0 works (it becomes 1: xorshift never leaves 0)
  }
  CHECK(ca != cc);
  double mean = 0;
  for (float x : ca) mean += x;
  CHECK(std::abs(mean / 1000 - 0.5) < 0.05);
}

TEST_CASE("sampler: multinomial and nucleus sampling follow the distribution and respect p") {
  // Logits of probabilities 0.7, 0.2, 0.1, ~0 at temperature 1.
  const std::vector<float> logits = {std::log(0.7f), std::log(0.2f), std::log(0.1f), -50.0f};
  Sampler all(1, 1.0f, 5), nucleus(1, 0.75f, 5), tight(1, 0.5f, 5);
  int counts[4] = {}, ncounts[4] = {};
  for (int i = 0; i < 4000; ++i) {
    ++counts[all.next(logits)];
    ++ncounts[nucleus.next(logits)];
    CHECK(tight.next(logits) == 0);  // 0.7 alone passes p = 0.5
  }
  CHECK(std::abs(counts[0] / 4000.0 - 0.7) < 0.03);
  CHECK(std::abs(counts[1] / 4000.0 - 0.2) < 0.03);
  CHECK(counts[3] == 0);
  // p = 0.75: the nucleus is {0.7, 0.2} (0.7 alone does not pass 0.75), renormalised.
  CHECK(ncounts[2] == 0);
  CHECK(std::abs(ncounts[0] / 4000.0 - 0.7 / 0.9) < 0.03);
  // A high temperature flattens, a low one sharpens.
  Sampler hot(100, 1.0f, 3), cold(0.01f, 1.0f, 3);
  std::set<int> seen_hot, seen_cold;
  for (int i = 0; i < 400; ++i) {
    seen_hot.insert(hot.next(logits));
    seen_cold.insert(cold.next(logits));
  }
  CHECK(seen_hot.size() == 4);
  CHECK(seen_cold == std::set<int>{0});
}

TEST_CASE("sampler: a negative or non-finite temperature and a non-finite p are refused") {
  CHECK_THROWS_AS(Sampler(-1, 0.9f, 1), ringattn::InvalidArgument);
  CHECK_THROWS_AS(Sampler(NAN, 0.9f, 1), ringattn::InvalidArgument);
  CHECK_THROWS_AS(Sampler(INFINITY, 0.9f, 1), ringattn::InvalidArgument);
  CHECK_THROWS_AS(Sampler(1, NAN, 1), ringattn::InvalidArgument);
}

TEST_CASE("sampler: a temperature below the floor (a denormal 1e-45 included) is greedy; logits / T that overflow are too") {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.999f};
  // 1e-45 is float's smallest denormal: every logits / T was inf, the softmax NaN, the token 0.
  for (const float t : {1e-45f, 1e-38f, 1e-10f, infer::kMinTemperature / 2}) {
    for (const float p : {0.0f, 0.5f, 0.9f, 1.0f}) {
      Sampler s(t, p, 42);
      for (int i = 0; i < 20; ++i) CHECK(s.next(logits) == 1);
    }
  }
  // At the floor and above the sampler samples: logits / T stay finite for a model's logits,
  // and a row that overflows anyway (3e38 / 1e-3) takes its largest, not a NaN's token 0.
  const std::vector<float> huge = {-3e38f, 3e38f, 1e38f};
  Sampler at_floor(infer::kMinTemperature, 0.9f, 7), multinomial(infer::kMinTemperature, 1.0f, 7);
  CHECK(at_floor.next(huge) == 1);
  CHECK(multinomial.next(huge) == 1);
  const std::vector<float> close = {0.0f, 0.0f};  // two equal logits: both drawn at the floor
  std::set<std::int32_t> seen;
  Sampler even(infer::kMinTemperature, 1.0f, 3);
  for (int i = 0; i < 64; ++i) seen.insert(even.next(close));
  CHECK(seen == std::set<std::int32_t>{0, 1});
}
