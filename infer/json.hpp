// infer — a JSON reader (nlohmann::json underneath) for the two inputs the job takes: a safetensors header and
// prompt lines. Not a general library: numbers keep their text (so token ids and byte
// offsets are read as exact integers, never through a double), and depth is bounded so a
// hostile file cannot exhaust the stack. Errors throw std::runtime_error with the byte
// offset; callers add the file name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace infer {

struct Json {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  std::string text;                    // a string's value, or a number's literal text
  std::vector<Json> items;             // array
  std::map<std::string, Json> fields;  // object (a repeated key is an error)

  // The number as an exact integer in [lo, hi]; throws naming `what` otherwise.
  std::int64_t as_int(std::string_view what, std::int64_t lo, std::int64_t hi) const;
  const Json* find(const std::string& key) const;  // nullptr if absent or not an object
};

Json parse_json(std::string_view text);

}  // namespace infer
