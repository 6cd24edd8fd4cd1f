// ringattn — one JSON object for `--json` output: fields in the order added, strings
// escaped, non-finite numbers written as null (JSON has no inf or NaN).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringattn::cli {

std::string json_quote(std::string_view s);  // s as a JSON string literal: quoted, with \" \\ and \uXXXX for control characters

class JsonObject;
std::string json_array(const std::vector<JsonObject>& values);  // "[{...},{...}]"

class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, std::int64_t value);
  JsonObject& add(std::string_view key, int value) { return add(key, static_cast<std::int64_t>(value)); }
  JsonObject& add(std::string_view key, std::uint64_t value);
  JsonObject& add(std::string_view key, bool value);
  JsonObject& add(std::string_view key, const JsonObject& value);
  JsonObject& add(std::string_view key, const std::vector<JsonObject>& values);  // an array of objects
  JsonObject& add_null(std::string_view key);
  std::string str() const;

 private:
  JsonObject& raw(std::string_view key, std::string_view json);
  std::string body_;
};

}  // namespace ringattn::cli
