// Finding added tokens in a text (infer/tokenizers/added_tokens.hpp): at a position, the
// longest added token that starts there, whichever order they were added in; the real
// tokenizers' texts are checked end to end against transformers.js in test_tokenizer_json.cpp.
#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "infer/tokenizers/added_tokens.hpp"

namespace {

using Match = std::pair<int, std::size_t>;

}  // namespace

TEST_CASE("added tokens: the longest that starts at a position, in any order added; none where none starts") {
  infer::AddedTokenTrie t;
  CHECK(t.empty());
  t.add("<unused1>", 7);
  t.add("<unused12>", 18);
  t.add("<u", 3);
  t.add("\n", 107);
  t.add("\n\n", 108);
  t.add("\xe2\x96\x81\xe2\x96\x81", 138);  // U+2581 U+2581
  t.add("<u", 99);                          // a text added twice keeps its first id
  CHECK_FALSE(t.empty());
  // a | <unused12> | <unused1> | <unused123 | <un | \n\n\n | x | U+2581 x 3
  const std::string s = "a<unused12><unused1><unused123<un\n\n\nx\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81";
  CHECK(t.longest_at(s, 0) == Match{-1, 0});
  CHECK(t.longest_at(s, 1) == Match{18, 10});
  CHECK(t.longest_at(s, 2) == Match{-1, 0});
  CHECK(t.longest_at(s, 11) == Match{7, 9});
  CHECK(t.longest_at(s, 20) == Match{3, 2});  // "<unused12" goes on with "3": only "<u" is a token
  CHECK(t.longest_at(s, 30) == Match{3, 2});
  CHECK(t.longest_at(s, 33) == Match{108, 2});
  CHECK(t.longest_at(s, 35) == Match{107, 1});
  CHECK(t.longest_at(s, 37) == Match{138, 6});
  CHECK(t.longest_at(s, 43) == Match{-1, 0});  // one U+2581 before the end
  CHECK(t.longest_at(s, s.size()) == Match{-1, 0});
}
