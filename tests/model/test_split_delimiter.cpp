// The Split pre-tokenizer on a literal (infer/tokenizers/split_delimiter.hpp) against the
// tokenizers library's own expectations: the cases of its tests (normalizer.rs `split`,
// pre_tokenizers/split.rs `basic`, `invert`), whose answers are written there, and the
// edges its code implies (no match, matches at both ends, a pattern of several bytes,
// UTF-8 patterns, an empty text). transformers.js runs every behavior but Removed as
// Isolated; test_tokenizer_json.cpp checks them against the library itself (npm tokenizers).
#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "infer/tokenizers/split_delimiter.hpp"

namespace {

using infer::SplitBehavior;

std::vector<std::string> split(std::string_view text, std::string_view pattern, SplitBehavior b, bool invert = false) {
  std::vector<std::string> out;
  for (const auto& [begin, end] : infer::split_literal(text, pattern, b, invert)) out.emplace_back(text.substr(begin, end - begin));
  return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("split on a literal: the library's five behaviors on its own example") {
  const std::string_view s = "The-final--countdown";
  CHECK(split(s, "-", SplitBehavior::removed) == V{"The", "final", "countdown"});
  CHECK(split(s, "-", SplitBehavior::isolated) == V{"The", "-", "final", "-", "-", "countdown"});
  CHECK(split(s, "-", SplitBehavior::merged_with_previous) == V{"The-", "final-", "-", "countdown"});
  CHECK(split(s, "-", SplitBehavior::merged_with_next) == V{"The", "-final", "-", "-countdown"});
  CHECK(split(s, "-", SplitBehavior::contiguous) == V{"The", "-", "final", "--", "countdown"});
}

TEST_CASE("split on a literal: the library's Split tests (spaces as the delimiter, invert)") {
  // split.rs `basic` splits "How are you doing?" on the spaces (an inverted word regex whose
  // non-matches are the spaces; "doing" and "?" are two matches there, one piece here).
  const std::string_view s = "How are you doing?";
  CHECK(split(s, " ", SplitBehavior::removed) == V{"How", "are", "you", "doing?"});
  CHECK(split(s, " ", SplitBehavior::isolated) == V{"How", " ", "are", " ", "you", " ", "doing?"});
  CHECK(split(s, " ", SplitBehavior::merged_with_previous) == V{"How ", "are ", "you ", "doing?"});
  CHECK(split(s, " ", SplitBehavior::merged_with_next) == V{"How", " are", " you", " doing?"});
  CHECK(split(s, " ", SplitBehavior::contiguous) == V{"How", " ", "are", " ", "you", " ", "doing?"});
  // split.rs `invert`: removing what is not "Hello" equals removing the spaces.
  CHECK(split("Hello Hello Hello", "Hello", SplitBehavior::removed, true) == split("Hello Hello Hello", " ", SplitBehavior::removed));
  CHECK(split("Hello Hello Hello", " ", SplitBehavior::removed) == V{"Hello", "Hello", "Hello"});
  // Inverted, the text between the pattern's matches is what counts as matched: Removed keeps
  // only the pattern, Contiguous joins runs, MergedWithPrevious joins "b" to the "X" before it.
  CHECK(split("aXXbXc", "X", SplitBehavior::removed, true) == V{"X", "X", "X"});
  CHECK(split("aXXbXc", "X", SplitBehavior::contiguous, true) == V{"a", "XX", "b", "X", "c"});
  CHECK(split("aXXbXc", "X", SplitBehavior::merged_with_previous, true) == V{"a", "X", "Xb", "Xc"});
}

TEST_CASE("split on a literal: edges (no match, matches at the ends, long and UTF-8 patterns, empty text)") {
  for (const SplitBehavior b : {SplitBehavior::removed, SplitBehavior::isolated, SplitBehavior::merged_with_previous,
                                SplitBehavior::merged_with_next, SplitBehavior::contiguous}) {
    CAPTURE(static_cast<int>(b));
    CHECK(split("", " ", b).empty());
    CHECK(split("word", " ", b) == V{"word"});
  }
  // A first match has no piece before it to join (MergedWithPrevious), a last none after it.
  CHECK(split(" a ", " ", SplitBehavior::merged_with_previous) == V{" ", "a "});
  CHECK(split(" a ", " ", SplitBehavior::merged_with_next) == V{" a", " "});
  CHECK(split("   ", " ", SplitBehavior::merged_with_previous) == V{" ", " ", " "});
  CHECK(split("   ", " ", SplitBehavior::contiguous) == V{"   "});
  CHECK(split("   ", " ", SplitBehavior::removed).empty());
  // Matches do not overlap and are found left to right.
  CHECK(split("aaaaa", "aa", SplitBehavior::isolated) == V{"aa", "aa", "a"});
  CHECK(split("x<sep>y<sep><sep>z", "<sep>", SplitBehavior::merged_with_previous) == V{"x<sep>", "y<sep>", "<sep>", "z"});
  // U+2581 (Gemma 3 and Llama 2's space mark) as the delimiter: cuts fall between characters.
  CHECK(split("\u2581the\u2581caf\u00e9\u2581", "\u2581", SplitBehavior::merged_with_next) == V{"\u2581the", "\u2581caf\u00e9", "\u2581"});
}

TEST_CASE("split on a literal: the behaviors by the names tokenizer.json gives them") {
  CHECK(infer::split_behavior("Removed") == SplitBehavior::removed);
  CHECK(infer::split_behavior("Isolated") == SplitBehavior::isolated);
  CHECK(infer::split_behavior("MergedWithPrevious") == SplitBehavior::merged_with_previous);
  CHECK(infer::split_behavior("MergedWithNext") == SplitBehavior::merged_with_next);
  CHECK(infer::split_behavior("Contiguous") == SplitBehavior::contiguous);
  CHECK_FALSE(infer::split_behavior("isolated").has_value());
  CHECK_FALSE(infer::split_behavior("").has_value());
}
