// infer/common/unicode.hpp: UTF-8 decoding with the WHATWG decoder's U+FFFD count (what Node's
// TextDecoder gives on the same bytes), encoding round trips over every scalar value, the
// streaming prefix, JavaScript's \p{L} \p{N} \s where they differ from what one might guess,
// and NFC on the cases UAX #15 and its tests single out (the expected values are Python's
// unicodedata.normalize('NFC', ...)).
#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "common/unicode.hpp"

using namespace infer::unicode;

namespace {

// "U+0065 U+0301": a failed CHECK shows code points (doctest cannot print a u32string).
std::string hex(std::u32string_view s) {
  std::string out;
  for (const char32_t c : s) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%sU+%04X", out.empty() ? "" : " ", static_cast<unsigned>(c));
    out += buf;
  }
  return out;
}

std::string decoded(std::string_view bytes) { return hex(decode_utf8(bytes)); }
std::string normalized(std::u32string_view s) { return hex(nfc(s)); }

}  // namespace

TEST_CASE("unicode: well-formed UTF-8 decodes to its code points") {
  CHECK(decoded("") == "");
  CHECK(decoded("Az") == "U+0041 U+007A");
  CHECK(decoded("\xC3\xA9") == "U+00E9");
  CHECK(decoded("\xE2\x82\xAC") == "U+20AC");
  CHECK(decoded("\xF0\x9F\x98\x80") == "U+1F600");
  CHECK(decoded("\xF4\x8F\xBF\xBF") == "U+10FFFF");
  CHECK(decoded("\xED\x9F\xBF") == "U+D7FF");  // the last scalar value before the surrogates
  CHECK(decoded(std::string_view("\0", 1)) == "U+0000");
}

TEST_CASE("unicode: ill-formed UTF-8 gives one U+FFFD per maximal subpart, as WHATWG does") {
  CHECK(decoded("\xF0\x9F\x98" "A") == "U+FFFD U+0041");          // truncated, then ASCII
  CHECK(decoded("\xED\xA0\x80") == "U+FFFD U+FFFD U+FFFD");        // a surrogate: ED A0 refused
  CHECK(decoded("\xC0\xAF") == "U+FFFD U+FFFD");                   // C0 never leads (overlong)
  CHECK(decoded("\xE0\x80\xAF") == "U+FFFD U+FFFD U+FFFD");        // overlong three-byte form
  CHECK(decoded("\xF4\x90\x80\x80") == "U+FFFD U+FFFD U+FFFD U+FFFD");  // past U+10FFFF
  CHECK(decoded("\xF5\x80") == "U+FFFD U+FFFD");
  CHECK(decoded("\xE2\x82") == "U+FFFD");                          // cut short by the end
  CHECK(decoded("a\x80" "b") == "U+0061 U+FFFD U+0062");           // a lone continuation byte
  CHECK(decoded("\xE2\x82\xC3\xA9") == "U+FFFD U+00E9");           // a lead ends the sequence in hand
  CHECK(decoded("\xFF\xFE") == "U+FFFD U+FFFD");
}

TEST_CASE("unicode: every scalar value survives encode then decode") {
  CHECK(encode_utf8(U"\u20AC") == "\xE2\x82\xAC");
  CHECK(encode_utf8(U"\U0001F600") == "\xF0\x9F\x98\x80");
  CHECK(encode_utf8(U"A\u00E9") == "A\xC3\xA9");
  int wrong = 0;
  std::string bytes;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    bytes.clear();
    append_utf8(bytes, c);
    if (decode_utf8(bytes) != std::u32string(1, c)) ++wrong;
  }
  CHECK(wrong == 0);
  const std::u32string text = U"tokens: \u00E9\u4E2D\U0001F600!";
  CHECK(decode_utf8(encode_utf8(text)) == text);
}

TEST_CASE("unicode: complete_utf8_prefix holds back only a tail that can still become a character") {
  const std::string emoji = "\xF0\x9F\x98\x80";
  for (std::size_t k = 1; k < 4; ++k) CHECK(complete_utf8_prefix("ab" + emoji.substr(0, k)) == 2);
  CHECK(complete_utf8_prefix("ab" + emoji) == 6);
  CHECK(complete_utf8_prefix("") == 0);
  CHECK(complete_utf8_prefix("\xE2\x82") == 0);
  CHECK(complete_utf8_prefix("ab\xC3") == 2);
  // Ill-formed tails are complete: they decode to U+FFFD whatever follows.
  CHECK(complete_utf8_prefix("ab\x80") == 3);
  CHECK(complete_utf8_prefix("ab\xF5") == 3);
  CHECK(complete_utf8_prefix("ab\xE0\x80") == 4);  // overlong from its second byte on
  CHECK(complete_utf8_prefix("\xED\xA0") == 2);    // a surrogate from its second byte on
  CHECK(complete_utf8_prefix("\xF4\x90") == 2);    // past U+10FFFF from its second byte on
  CHECK(complete_utf8_prefix("\xC3\xA9\x80") == 3);

  // Streaming: decoding the complete prefix, then the rest, gives the whole text's decoding
  // wherever the bytes were cut, and never more than 3 bytes are held.
  const std::string mixed = "a\xC3\xA9\xF0\x9F\x98\x80\xE2\x82\xED\xA0\x80\xF0\x9F\x98" "b\xE4\xB8\xAD\xC0";
  const std::u32string whole = decode_utf8(mixed);
  for (std::size_t cut = 0; cut <= mixed.size(); ++cut) {
    const std::size_t k = complete_utf8_prefix(std::string_view(mixed).substr(0, cut));
    CAPTURE(cut);
    CHECK(cut - k <= 3);
    CHECK(hex(decode_utf8(mixed.substr(0, k)) + decode_utf8(mixed.substr(k))) == hex(whole));
  }
}

TEST_CASE("unicode: character classes are JavaScript's \\p{L}, \\p{N} and \\s") {
  CHECK(is_letter(U'a'));
  CHECK(is_letter(U'Z'));
  CHECK_FALSE(is_letter(U'0'));
  CHECK_FALSE(is_letter(U'_'));
  CHECK(is_letter(U'\u00E9'));
  CHECK(is_letter(U'\u4E2D'));  // a CJK ideograph is Lo
  CHECK_FALSE(is_letter(U'\u0301'));  // a combining mark is M, not L
  CHECK(is_number(U'7'));
  CHECK(is_number(U'\u0663'));  // ARABIC-INDIC DIGIT THREE
  CHECK(is_number(U'\u00BD'));  // VULGAR FRACTION ONE HALF is No
  CHECK_FALSE(is_letter(U'\u00BD'));
  CHECK_FALSE(is_number(U'a'));
  for (const char32_t c : std::u32string_view(U" \t\n\v\f\r")) CHECK(is_space(c));
  CHECK(is_space(U'\u00A0'));   // NO-BREAK SPACE
  CHECK(is_space(U'\uFEFF'));   // JavaScript's \s has the BOM, which is not White_Space
  CHECK_FALSE(is_space(U'\u0085'));  // NEXT LINE is White_Space, but not JavaScript's \s
  CHECK(is_space(U'\u3000'));   // IDEOGRAPHIC SPACE
  CHECK(is_space(U'\u2028'));
  CHECK_FALSE(is_space(U'\u200B'));  // ZERO WIDTH SPACE is Cf
  CHECK_FALSE(is_space(U'a'));
  CHECK_FALSE(is_letter(0x110000));
  CHECK_FALSE(is_space(0));
}

TEST_CASE("unicode: NFC composes, reorders and honours the exclusions") {
  CHECK(normalized(U"e\u0301") == "U+00E9");
  CHECK(normalized(U"\u1E0A\u0323") == "U+1E0C U+0307");      // dot below sorts first and composes
  CHECK(normalized(U"\u0041\u030A\u0301") == "U+01FA");        // A ring, then acute on that
  CHECK(normalized(U"A\u0301\u0328") == "U+0104 U+0301");      // ogonek (202) sorts before acute (230)
  CHECK(normalized(U"a\u0301\u0301") == "U+00E1 U+0301");      // the second acute is blocked
  CHECK(normalized(U"e\u0327\u0301") == "U+0229 U+0301");
  CHECK(normalized(U"\u0301e") == "U+0301 U+0065");            // no starter before the mark
  CHECK(normalized(U"\u1E08") == "U+1E08");                    // decomposes two steps, recomposes
  CHECK(normalized(U"\u0958") == "U+0915 U+093C");             // a composition exclusion
  CHECK(normalized(U"\u0344") == "U+0308 U+0301");             // a non-starter decomposition
  CHECK(normalized(U"\u0F73") == "U+0F71 U+0F72");
  CHECK(normalized(U"\u212B") == "U+00C5");                    // ANGSTROM SIGN, a singleton
  CHECK(normalized(U"\u1100\u1161\u11A8") == "U+AC01");        // Hangul L V T
  CHECK(normalized(U"\uAC00\u11A8") == "U+AC01");              // Hangul LV + T
  CHECK(normalized(U"\uAC01") == "U+AC01");
  CHECK(normalized(U"") == "");
  const std::u32string ascii = U"Hello, world! \u00C0 la carte";  // all below U+0300
  CHECK(nfc(ascii) == ascii);
}
