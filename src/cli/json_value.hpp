// ringattn — a strict little JSON reader: the launcher reads its nodes' reports with it, and
// the tests check that `--json` printed valid JSON (RFC 8259: no trailing commas, no NaN,
// nothing after the value) and look at its fields.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ringattn::cli {

struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> items;                             // array
  std::vector<std::pair<std::string, JsonValue>> fields;    // object, in order

  // The field `key` of an object, or nullptr.
  const JsonValue* get(std::string_view key) const;
};

// Arrays and objects nest at most this deep (every reader of peer and client input uses
// this parser; the daemon's control messages are 3 levels deep).
inline constexpr int kMaxJsonDepth = 64;

// Parses exactly one JSON value, allowing whitespace around it; throws
// std::runtime_error naming the offset of the first error (also for nesting deeper than
// kMaxJsonDepth, found before any deeper level is read).
JsonValue parse_json(std::string_view text);

}  // namespace ringattn::cli
