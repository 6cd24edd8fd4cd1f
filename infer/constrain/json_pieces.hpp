// infer — constrained decoding: JSON's lexical pieces as grammar fragments (grammar.hpp), for
// the schema compiler (json_schema.cpp) and the free-form value of json_object.
//
// The bounds that make every text finite where the schema does not bound it itself (and that a
// model's output must keep to):
//   whitespace    at most kMaxWhitespace bytes of space, tab, newline or carriage return
//                 between two tokens of the JSON text and before it, none after it;
//   numbers       at most kMaxIntegerDigits digits before the point, kMaxFractionDigits after
//                 it, an exponent of at most kMaxExponentDigits digits; integers without a
//                 fraction or exponent;
//   strings       any Unicode scalar value, raw as UTF-8 (well-formed: no overlong forms, no
//                 surrogates) or escaped (\" \\ \/ \b \f \n \r \t, \uXXXX of a non-surrogate,
//                 a \uD8xx\uDCxx pair for one character beyond the BMP); never a raw control
//                 character. A length counts characters (an escape, a pair, a UTF-8 sequence:
//                 one each), as JSON Schema does.
//   nesting       a free-form value's arrays and objects count against kMaxNesting.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "grammar.hpp"

namespace infer::constrain {

inline constexpr int kMaxWhitespace = 1;
inline constexpr int kMaxIntegerDigits = 16;
inline constexpr int kMaxFractionDigits = 16;
inline constexpr int kMaxExponentDigits = 2;
inline constexpr std::uint32_t kUnbounded = 0xFFFFFFFFu;  // a string's or array's missing maximum

// Fragments go from a node `from` to a node `to` (the bytes of the piece lead from one to the
// other). The shared rules (a string of given bounds, a number, an integer, any value) are
// made once, on first use, and called.
class JsonPieces {
 public:
  explicit JsonPieces(GrammarBuilder& b) : b_(b) {}

  // A node that allows up to kMaxWhitespace whitespace bytes and then goes on as `target`.
  std::uint32_t ws(std::uint32_t target);
  // Exactly `text`, and, sharing prefixes, exactly one of `texts`.
  void literal(std::uint32_t from, const std::string& text, std::uint32_t to);
  void literals(std::uint32_t from, const std::vector<std::string>& texts, std::uint32_t to);

  // Calls to the shared rules (a string of [min, max] characters, max kUnbounded for none).
  void string(std::uint32_t from, std::uint32_t min, std::uint32_t max, std::uint32_t to);
  void number(std::uint32_t from, std::uint32_t to);
  void integer(std::uint32_t from, std::uint32_t to);
  void any_value(std::uint32_t from, std::uint32_t to);
  // A free-form object or array, in place.
  void any_object(std::uint32_t from, std::uint32_t to);
  void any_array(std::uint32_t from, std::uint32_t to);

  // The states a string of [min, max] characters takes (for a budget check before it is made).
  static std::uint64_t string_states(std::uint32_t min, std::uint32_t max);

 private:
  void character(std::uint32_t from, std::uint32_t to);  // one character inside a string
  std::uint32_t string_rule(std::uint32_t min, std::uint32_t max);
  std::uint32_t number_rule(bool fraction);
  std::uint32_t value_rule();
  GrammarBuilder& b_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> strings_;  // (min, max) -> entry
  std::uint32_t number_ = kNever, integer_ = kNever, value_ = kNever;
};

}  // namespace infer::constrain
