// Random walks through a grammar as generation makes them (test_walks.cpp): seeded random logits,
// Matcher::mask, the largest logit, advance(), until an end token. For the first `budget` tokens
// the logits are uniform (any allowed token as likely as any other); past it they favour the
// tokens that close the text (closing_score: where the text stands, brackets closed and strings
// left, not opened; no commas or whitespace; short ones), so every walk ends: it must within
// budget + kClosingTokens tokens, the bound the tests state.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "infer/constrain/matcher.hpp"

namespace test {

inline constexpr int kClosingTokens = 400;

struct Walk {
  std::string text;
  int tokens = 0;  // the end token not counted
};

// Where a text stands lexically: inside a string, after a backslash there.
struct Lex {
  bool in_string = false, escaped = false;
  void feed(char c) {
    if (escaped) escaped = false;
    else if (in_string && c == '\\') escaped = true;
    else if (c == '"') in_string = !in_string;
  }
};

// How much a token's bytes, from `at`, close the text: brackets closed and a string left count
// for it; a string entered, brackets opened, commas, colons and whitespace outside strings
// against it; then short.
inline float closing_score(Lex at, std::string_view b) {
  float s = 0;
  const bool was_in_string = at.in_string;
  for (const char c : b) {
    if (!at.in_string) {
      if (c == ']' || c == '}') s += 3;
      else if (c == '[' || c == '{') s -= 3;
      else if (c == ',') s -= 1;
      else if (c == ':') s -= 0.2f;
      else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') s -= 0.3f;
    }
    at.feed(c);
  }
  if (was_in_string != at.in_string) s += at.in_string ? -2 : 2;
  return s - 0.01f * static_cast<float>(b.size());
}

// The mask (trie walks, their memo, the uncertain tokens) against allows() (each token's bytes
// tried one by one from the state), over every id.
inline void check_mask(const infer::constrain::Matcher& m, std::size_t rows, const std::string& after) {
  std::vector<std::uint64_t> bits;
  m.allowed(bits, rows);
  std::size_t differ = 0, first = rows;
  for (std::size_t id = 0; id < rows; ++id)
    if (((bits[id / 64] >> (id % 64)) & 1) != m.allows(static_cast<std::int32_t>(id)) && differ++ == 0) first = id;
  CHECK_MESSAGE(differ == 0, differ << " ids (the first " << first << ") where the mask and allows() differ after " << after);
}

// `check_every` > 0: check_mask at every that many steps.
inline Walk walk(const infer::constrain::Grammar& g, const infer::constrain::TokenBytes& vocab, const std::vector<std::int32_t>& ends,
                 std::size_t rows, int budget, std::mt19937& rng, int check_every = 0) {
  infer::constrain::Matcher m(g, vocab, ends);
  std::vector<float> logits(rows);
  // xorshift64*, seeded from `rng`: 128k logits a step cost little.
  std::uint64_t x = (std::uint64_t{rng()} << 32 | rng()) | 1;
  auto u = [&x] {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return static_cast<float>((x * 2685821657736338717ull) >> 40) / static_cast<float>(1 << 24);
  };
  Walk w;
  Lex lex;
  for (;;) {
    const bool closing = w.tokens >= budget;
    for (std::size_t i = 0; i < rows; ++i) {
      const auto id = static_cast<std::int32_t>(i);
      const bool end = std::find(ends.begin(), ends.end(), id) != ends.end();
      logits[i] = closing ? (end ? 1e9f : closing_score(lex, vocab.bytes(id))) + 0.001f * u() : u();
    }
    if (check_every > 0 && w.tokens % check_every == 0) check_mask(m, rows, w.text);
    m.mask(logits);
    const auto pick = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    REQUIRE_MESSAGE(std::isfinite(logits[static_cast<std::size_t>(pick)]), "no token allowed after " << w.text);
    m.advance(pick);
    if (m.ended()) return w;
    w.text += vocab.bytes(pick);
    for (const char c : vocab.bytes(pick)) lex.feed(c);
    REQUIRE_MESSAGE(++w.tokens <= budget + kClosingTokens, "the walk did not end within " << budget + kClosingTokens << " tokens: " << w.text);
  }
}

}  // namespace test
