// infer — the project's one strict JSON reader, on nlohmann::json (nlohmann-json3-dev): the
// model files' inputs here (a safetensors header, prompt lines), and in the programs of src/
// everything a peer or a client sends (control messages, the HTTP endpoint's bodies, node
// reports). The tree is nlohmann's own; this adds the rules every reader of untrusted
// input needs: RFC 8259 strictly (UTF-8 checked, nothing after the value), nesting bounded
// as each array or object opens (a hostile body cannot exhaust memory or stack), a repeated
// key in an object refused (no reader may see another value than the writer meant), and
// integers read exactly (json_int: an integer literal in range, never through a double).
// Errors throw std::runtime_error naming the byte offset where one is known; callers add
// the file or peer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace infer {

using Json = nlohmann::ordered_json;  // fields in the order written
// Objects as sorted maps: for a file with objects of 100k+ keys (a tokenizer's vocabulary),
// whose ordered objects would be found and built in linear time per key.
using JsonMap = nlohmann::json;

inline constexpr int kMaxJsonDepth = 64;  // the daemon's deepest message is 3 levels

// Exactly one JSON value, whitespace around it allowed.
Json parse_json(std::string_view text);
JsonMap parse_json_map(std::string_view text);

// `j` as an exact integer in [lo, hi] (an integer literal: 1.0, 1e3 and "1" are refused);
// throws naming `what`, the range and what it was.
// (For Json and JsonMap.)
template <class J>
std::int64_t json_int(const J& j, std::string_view what, std::int64_t lo, std::int64_t hi);

// The field `key` of object `j`, or nullptr (also when `j` is not an object); the typed
// ones also when the field has another type.
template <class J>
const J* json_field(const J& j, std::string_view key);
const std::string* json_string(const Json& j, std::string_view key);
std::optional<double> json_number(const Json& j, std::string_view key);

}  // namespace infer
