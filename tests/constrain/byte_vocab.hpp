// The constrained-decoding tests' smallest vocabulary: id b is the byte b (0..255), id 256 the end
// token; a text fed to a matcher byte by byte, with the mask asked before every byte.
#pragma once

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infer/constrain/matcher.hpp"

namespace test {

inline constexpr std::int32_t kByteEnd = 256;

inline const infer::constrain::TokenBytes& byte_vocab() {
  static const infer::constrain::TokenBytes v = [] {
    std::vector<std::optional<std::string>> b;
    for (int i = 0; i < 256; ++i) b.emplace_back(std::string(1, static_cast<char>(i)));
    b.emplace_back(std::nullopt);  // the end token
    return infer::constrain::TokenBytes(std::move(b));
  }();
  return v;
}

inline bool bit(const std::vector<std::uint64_t>& bits, std::size_t i) { return (bits[i / 64] >> (i % 64)) & 1; }

// Whether `g` takes `text` whole: every byte allowed by the mask exactly when advance() takes it,
// and the end token allowed at the end exactly when the matcher says the text is complete.
inline bool accepts(const infer::constrain::Grammar& g, std::string_view text) {
  infer::constrain::Matcher m(g, byte_vocab(), {kByteEnd});
  std::vector<std::uint64_t> bits;
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    m.allowed(bits, 257);
    bool took = true;
    try {
      m.advance(b);
    } catch (const ringattn::InvalidArgument&) {
      took = false;
    }
    CHECK_MESSAGE(took == bit(bits, b), "the mask and advance() disagree on byte " << int(b) << " of " << text);
    if (!took) return false;
  }
  m.allowed(bits, 257);
  CHECK(bit(bits, kByteEnd) == m.complete());
  return m.complete();
}

}  // namespace test
