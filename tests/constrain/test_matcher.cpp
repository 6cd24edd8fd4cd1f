// The matcher (infer/constrain/matcher.hpp) on vocabularies whose tokens span several pieces of
// JSON (`":"`, `"},{"`, `1,`): its mask, from cached trie walks and the uncertain tokens checked
// against the real stack, equals the brute-force answer (each token tried by advance() on a
// fresh matcher replaying the text so far), at every step of seeded random walks; end tokens,
// complete(), done() and the errors of advance().
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "infer/common/json.hpp"
#include "infer/constrain/json_schema.hpp"
#include "tests/constrain/byte_vocab.hpp"
#include "tests/error_of.hpp"

namespace {

using infer::constrain::Grammar;
using infer::constrain::Matcher;
using infer::constrain::TokenBytes;

// JSON's pieces and their joins, a few words, the bytes, ids with no bytes among them, and the
// end token last.
TokenBytes fragment_vocab(std::int32_t& end) {
  std::vector<std::optional<std::string>> v;
  for (const char* t : {"{", "}", "[", "]", ",", ":", "\"", "\":", "\":\"", "\",", "\",\"", "\"}", "\"]", "\"},{\"", "},{", "}]", "]}", "{\"",
                        "[{", "[\"", "[[", "]]", "}}", " ", "  ", "\n", "\n  ", "\n    ", " \"", ", \"", "\": ", ",\n", "1", "12", "123", "0", "-",
                        "-1", ".", ".5", "e", "E+", "e-", "1,", "2]", "3}", "0.", "true", "false", "null", "tr", "ue", "nu", "ll", "fa", "lse",
                        "a", "ab", "abc", "name", "\"name", "\"name\":", "age", "kind", "leaf", "node", "children", "items", "v", "\\", "\\n",
                        "\\\"", "\\u", "00", "e9", "d83d", "\\ude00", "\xc3", "\xa9", "\xc3\xa9", "\xf0\x9f", "\x98\x80", "x y", "red", "green",
                        "\"red\"", "\"green\"", "},", "],", "\"a\"", "\t", "\r\n", "A", "Z", "9", "abcdefghij", "hello world", "xyzxyzxyz", "abcd\"",
                        "abcdef\",", "hello\"]", "\xc3\xa9t\xc3\xa9", "ok\\n"})
    v.emplace_back(t);
  v.emplace_back(std::nullopt);   // a special token
  v.emplace_back(std::string());  // an empty piece: never allowed either
  for (int b = 0x20; b < 0x7F; ++b) v.emplace_back(std::string(1, static_cast<char>(b)));
  end = static_cast<std::int32_t>(v.size());
  v.emplace_back(std::nullopt);
  return TokenBytes(std::move(v));
}

std::vector<std::uint64_t> brute_force(const Grammar& g, const TokenBytes& vocab, std::int32_t end, const std::vector<std::int32_t>& text) {
  const auto n = static_cast<std::size_t>(vocab.vocab());
  std::vector<std::uint64_t> bits((n + 63) / 64, 0);
  for (std::size_t id = 0; id < n; ++id) {
    Matcher m(g, vocab, {end});
    for (const std::int32_t t : text) m.advance(t);
    try {
      m.advance(static_cast<std::int32_t>(id));
      bits[id / 64] |= std::uint64_t{1} << (id % 64);
    } catch (const ringattn::InvalidArgument&) {
    }
  }
  return bits;
}

// Random walks on `g`: at each step the mask against brute force, then a uniformly random
// allowed token; the end token once allowed with probability 1/4 (else the walk goes on while
// it can). Returns the texts.
std::vector<std::string> walks(const Grammar& g, int count, std::uint32_t seed) {
  std::int32_t end = 0;
  const TokenBytes vocab = fragment_vocab(end);
  std::mt19937 rng(seed);
  std::vector<std::string> texts;
  for (int w = 0; w < count; ++w) {
    Matcher m(g, vocab, {end});
    std::vector<std::int32_t> text;
    std::string bytes;
    for (int step = 0; step < 100 && !m.ended(); ++step) {
      std::vector<std::uint64_t> bits;
      m.allowed(bits, static_cast<std::size_t>(vocab.vocab()));
      const std::vector<std::uint64_t> want = brute_force(g, vocab, end, text);
      REQUIRE_MESSAGE(bits == want, "the mask differs from brute force after \"" << bytes << "\"");
      for (std::int32_t id = 0; id < vocab.vocab(); ++id) CHECK(m.allows(id) == test::bit(want, static_cast<std::size_t>(id)));
      std::vector<std::int32_t> ok;
      for (std::int32_t id = 0; id < vocab.vocab(); ++id)
        if (test::bit(bits, static_cast<std::size_t>(id)) && id != end) ok.push_back(id);
      std::int32_t pick;
      if (test::bit(bits, static_cast<std::size_t>(end)) && (ok.empty() || rng() % 4 == 0)) pick = end;
      else {
        REQUIRE_FALSE(ok.empty());
        pick = ok[rng() % ok.size()];
      }
      m.advance(pick);
      if (pick != end) {
        text.push_back(pick);
        bytes += vocab.bytes(pick);
      }
    }
    texts.push_back(bytes);
  }
  return texts;
}

}  // namespace

TEST_CASE("constrain: the mask equals brute force over tokens that span pieces of JSON") {
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},"age":{"type":"integer"},
          "items":{"type":"array","items":{"enum":["red","green",1]},"maxItems":3}},"required":["name","age","items"]})",
      R"({"type":"array","items":{"anyOf":[{"type":"number"},{"type":"object","properties":{"a":{"type":"boolean"}}}]}})",
      R"({"$defs":{"n":{"type":"object","properties":{"kind":{"const":"node"},"children":{"type":"array","items":{"$ref":"#/$defs/n"}}},
          "required":["kind","children"]}},"$ref":"#/$defs/n"})",
      R"({"type":["string","null"],"minLength":1})",
      R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":7},"maxItems":3})",
      R"({"type":"object","properties":{"s":{"type":"string"},"t":{"type":"string","maxLength":12}},"required":["s","t"]})",
  };
  std::uint32_t seed = 1;
  for (const char* s : schemas) {
    CAPTURE(s);
    for (const std::string& t : walks(infer::constrain::json_schema_grammar(infer::parse_json(s)), 6, seed++)) CHECK(!t.empty());
  }
  for (const std::string& t : walks(infer::constrain::json_object_grammar(), 6, 99)) CHECK(t.find('{') != std::string::npos);
}

TEST_CASE("constrain: end tokens come only after a whole value, and alone once nothing can follow") {
  const Grammar g = infer::constrain::json_schema_grammar(infer::parse_json(R"({"type":"integer"})"));
  Matcher m(g, test::byte_vocab(), {test::kByteEnd, 300});
  std::vector<float> logits(301, 0.0f);
  m.mask(logits);
  CHECK(logits[test::kByteEnd] < 0);
  CHECK(std::isinf(logits[300]));
  CHECK(logits['1'] == 0.0f);
  CHECK(std::isinf(logits['a']));
  CHECK(std::isinf(logits[299]));  // past the vocabulary: never text
  CHECK_FALSE(m.complete());
  m.advance('4');
  CHECK(m.complete());
  CHECK_FALSE(m.done());  // more digits may follow
  std::fill(logits.begin(), logits.end(), 0.0f);
  m.mask(logits);
  CHECK(logits[test::kByteEnd] == 0.0f);
  CHECK(logits[300] == 0.0f);
  CHECK(logits['2'] == 0.0f);
  m.advance(300);
  CHECK(m.ended());
  CHECK_FALSE(m.complete());
  std::fill(logits.begin(), logits.end(), 0.0f);
  m.mask(logits);
  CHECK(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isinf(x); }));
  CHECK(ringattn::test::error_of([&] { m.advance('1'); }) ==
        "token 49 may not come next in the response format's grammar: the text has ended");

  Matcher o(infer::constrain::json_object_grammar(), test::byte_vocab(), {test::kByteEnd});
  CHECK(ringattn::test::error_of([&] { o.advance(test::kByteEnd); }) ==
        "token 256 may not come next in the response format's grammar: an end token before the value is complete");
  CHECK(ringattn::test::error_of([&] { o.advance('x'); }) == "token 120 may not come next in the response format's grammar: its bytes do not fit");
  o.advance('{');  // the refusals left the state as it was
  o.advance('}');
  CHECK(o.done());
  std::vector<std::uint64_t> bits;
  o.allowed(bits, 257);
  for (std::size_t i = 0; i < 257; ++i) CHECK(test::bit(bits, i) == (i == test::kByteEnd));
  CHECK_THROWS_AS(Matcher(g, test::byte_vocab(), {-1}), ringattn::InvalidArgument);
}
