// The check test_token_bytes.cpp and the Llama 3 case of test_walks.cpp share: a tokenizer's
// stream against its tokens' bytes joined, on seeded random sequences of well-formed UTF-8.
#pragma once

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "infer/constrain/token_bytes.hpp"
#include "infer/job/text_tokenizer.hpp"

namespace test {

// How `s` stands as UTF-8: -1 ill-formed, else the bytes its last character still needs.
inline int utf8_open(std::string_view s) {
  int need = 0;
  unsigned lo = 0x80, hi = 0xBF;  // the range of the next continuation byte
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (need > 0) {
      if (c < lo || c > hi) return -1;
      --need;
      lo = 0x80;
      hi = 0xBF;
      continue;
    }
    if (c < 0x80) continue;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return -1;
    }
  }
  return need;
}

// `count` sequences of 1..40 text tokens (seeded) whose bytes join into well-formed UTF-8.
inline std::vector<std::vector<int>> utf8_sequences(const infer::constrain::TokenBytes& bytes, int count, std::uint32_t seed) {
  std::vector<int> text_ids;
  for (std::int32_t id = 0; id < bytes.vocab(); ++id)
    if (bytes.text(id)) text_ids.push_back(id);
  std::mt19937 rng(seed);
  std::vector<std::vector<int>> out;
  while (static_cast<int>(out.size()) < count) {
    std::vector<int> seq;
    std::string joined;
    const std::size_t len = 1 + rng() % 40;
    for (int tries = 0; tries < 20000 && (seq.size() < len || utf8_open(joined) != 0); ++tries) {
      const int id = text_ids[rng() % text_ids.size()];
      const std::string next = joined + std::string(bytes.bytes(id));
      if (utf8_open(next) < 0) continue;
      seq.push_back(id);
      joined = next;
    }
    if (utf8_open(joined) == 0) out.push_back(std::move(seq));
  }
  return out;
}

inline void check_token_bytes(const infer::TextTokenizer& tok, const infer::constrain::TokenBytes& bytes, int count, std::uint32_t seed) {
  const std::vector<int> prompt = tok.encode("Hi", true);
  for (const std::vector<int>& seq : utf8_sequences(bytes, count, seed)) {
    std::string joined;
    for (const int id : seq) joined += bytes.bytes(id);
    CAPTURE(joined);
    auto run = [&](std::span<const int> p) {
      const auto s = tok.stream(p);
      std::string text;
      for (const int id : seq) text += s->next(id);
      return text + s->finish();
    };
    CHECK(run(prompt) == joined);
    const std::string first = run(tok.opening());
    CHECK((first == joined || (joined.starts_with(" ") && first == joined.substr(1))));
    infer::constrain::BytesStream bs(bytes);
    std::string streamed;
    for (const int id : seq) {
      const std::string piece = bs.next(id);
      CHECK(utf8_open(piece) == 0);
      streamed += piece;
    }
    CHECK(bs.finish().empty());
    CHECK(streamed == joined);
  }
}

}  // namespace test
