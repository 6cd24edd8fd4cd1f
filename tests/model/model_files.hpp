// Where the model tests find stories260K (never in this repository), and what llama2.c's
// run.c printed for it (../shared/models/stories260K/README.md).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tests/skip.hpp"

namespace test {

inline constexpr std::int32_t kVocab = 512;

// The stories260K folder: $RINGATTN_MODEL_DIR if set, else ../shared/models/stories260K beside
// the checkout. Where the files are not there: nullopt, and the calling test case is skipped
// (tests/skip.hpp); it returns at once.
inline std::optional<std::filesystem::path> model_dir() {
  namespace fs = std::filesystem;
  std::vector<fs::path> tries;
  if (const char* d = std::getenv("RINGATTN_MODEL_DIR"); d && *d) tries.emplace_back(d);  // then only there
  else tries.emplace_back(fs::path(RINGATTN_SOURCE_ROOT) / ".." / "shared" / "models" / "stories260K");
  for (const auto& p : tries)
    if (fs::is_regular_file(p / "tok512.bin") && fs::is_regular_file(p / "stories260K.bin")) return p;
  skip("no model at " + tries.back().string() + " (set RINGATTN_MODEL_DIR to the stories260K folder)");
  return std::nullopt;
}

inline const std::vector<int> kPromptIds = {1, 403, 407, 261, 378};  // BOS " Once" " upon" " a" " time"
// The prompt's 4 tokens, then the 60 run.c generated at temperature 0 (-n 64).
inline const std::vector<int> kRunIds = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408,
    419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426,
    338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310};
inline const std::string kRunText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big, red ball. She wanted to play with it, but it was too high.\nLily";

// run.c with no prompt, -t 0.0 (its default 256 steps), and -t 1.0 -p 0.9 -s 133742: the
// samples in llama2.c's doc/stories260K.md (run.c prints a final newline; the first is also
// ../shared/models/stories260K/README.md's 256-token text).
inline const std::string kGreedy256Text =
    kRunText +
    "'s mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She said, \"I want to "
    "play with your ball, but I can't find it.\"\nLily was sad and didn't know what to do. She said, \"I'm sorry, "
    "Lily. I didn't know what to do.\"\nLily didn't want to help her mom, so she said, \"I'm sorry, mom. I didn't "
    "know what to do.\" Her mom said, \"Don't worry, Lily. We can help you.\n";
inline const std::string kSeededText =
    "Once upon a time, there was a little boy named Timmy. Timmy loved to play with his toys and eat sandwiches. One "
    "day, Timmy's mom told him it was time to rest for a while. Timmy's friend Billy came over and took him a down.\n"
    "Timmy's mom saw that Timmy was sad, but Timmy said, \"I didn't understand what is it! We need to find some "
    "leafs.\" Timmy thought about it and took a deep breath on a spoon. He hoped it was important to be kind and "
    "continued to find its image next time.\nAfter they finished getting, Timmy's dad came up to his house and "
    "promised to help Timmy.\n";

}  // namespace test
