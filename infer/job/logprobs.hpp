// infer — log probabilities from a row of logits, as OpenAI's logprobs report them: the
// chosen token's log softmax and the `top` most likely tokens' (largest first, ties in
// index order), computed in float64 from the exact logits the token was chosen from (before
// temperature, top-p or any mask: the model's own distribution).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace infer {

struct TokenLogprobs {
  double logprob = 0;                                  // of the chosen token
  std::vector<std::pair<std::int32_t, double>> top;   // (id, log probability), at most `top`
};

// `row` finite or -inf (at least one finite); `token` in [0, row.size()); top in [0, 20].
TokenLogprobs logprobs_of(std::span<const float> row, std::int32_t token, int top);

}  // namespace infer
