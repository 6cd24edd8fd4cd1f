// ringattn — a strict JSON reader (nlohmann::json underneath): the launcher reads its nodes' reports with it, and
// the tests check that `--json` printed valid JSON (RFC 8259: no trailing commas, no NaN,
// nothing after the value) and look at its fields.
#pragma once

#include <optional>
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

// The JSON text of field `key` of the object `json` (checked as parse_json checks), e.g. a
// reply's "data" to pass on unchanged; std::nullopt if `json` is an object without it.
// Throws std::runtime_error if `json` is not valid JSON or not an object.
std::optional<std::string> json_member(std::string_view json, std::string_view key);

}  // namespace ringattn::cli
