// infer — choosing the next token from a row of logits: greedy (temperature 0: the first
// of the largest, as run.c's argmax), or llama2.c's sampler — the logits divided by the
// temperature, a float32 softmax, one coin per token from a xorshift64* generator seeded
// with the seed, then multinomial sampling or top-p (nucleus: the most likely tokens whose
// probabilities sum past p, in descending order, ties kept in index order). A seeded run
// draws what llama2.c's run.c draws from the same logits.
//
// A temperature below kMinTemperature is greedy: logits / T overflows float for small T (a
// denormal 1e-45 made every logit inf, the softmax NaN and every token <unk>), and below
// 1e-3 the sampler is greedy in all but name for any logits a model makes (a gap of 0.1
// between the two likeliest is e^100 at T = 1e-3). At or above the floor, a row whose
// largest logit / T still overflows (logits beyond 3.4e35: no model's) is greedy too, so no
// finite row ever samples from NaN.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace infer {

// The index of the largest element (the first of equal ones).
std::int32_t argmax(std::span<const float> x);

// Temperatures in [0, kMinTemperature) are greedy (argmax), never divided by.
inline constexpr float kMinTemperature = 1e-3f;

class Sampler {
 public:
  // temperature >= 0 (below kMinTemperature: greedy); top_p in (0, 1) for nucleus sampling, else multinomial;
  // seed: the generator's state (0 is replaced by 1: xorshift never leaves 0).
  Sampler(float temperature, float top_p, std::uint64_t seed);

  std::int32_t next(std::span<const float> logits);

  // One coin in [0, 1): 24 random bits (what run.c's random_f32 returns).
  float coin();

  // The generator's state now: a Sampler made with it as its seed draws what this one
  // draws next (a daemon's reply that pauses for a newcomer goes on with the same coins).
  std::uint64_t state() const { return state_; }

 private:
  float temperature_, top_p_;
  std::uint64_t state_;
  std::vector<float> probs_;
  std::vector<std::pair<float, std::int32_t>> nucleus_;
};

}  // namespace infer
