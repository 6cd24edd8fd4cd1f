// ringattn — one JSON object for the programs' output (`--json`, reports, benchmark
// lines, control messages): fields in the order added, written by nlohmann::json
// (nlohmann-json3-dev). Non-finite numbers become null (JSON has no inf or NaN); bytes
// that are not UTF-8 become U+FFFD, so the output is always valid JSON.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ringattn::cli {

std::string json_quote(std::string_view s);  // s as a JSON string literal

class JsonObject;
std::string json_array(const std::vector<JsonObject>& values);  // "[{...},{...}]"

class JsonObject {
 public:
  JsonObject();
  ~JsonObject();
  JsonObject(const JsonObject& other);
  JsonObject& operator=(const JsonObject& other);
  JsonObject(JsonObject&& other);
  JsonObject& operator=(JsonObject&& other);

  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, const std::string& value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, std::int64_t value);
  JsonObject& add(std::string_view key, int value) { return add(key, static_cast<std::int64_t>(value)); }
  JsonObject& add(std::string_view key, long long value) { return add(key, static_cast<std::int64_t>(value)); }
  JsonObject& add(std::string_view key, std::uint64_t value);
  JsonObject& add(std::string_view key, unsigned value) { return add(key, static_cast<std::uint64_t>(value)); }
  JsonObject& add(std::string_view key, bool value);
  JsonObject& add(std::string_view key, const JsonObject& value);
  JsonObject& add(std::string_view key, const std::vector<JsonObject>& values);  // an array of objects
  JsonObject& add(std::string_view key, const std::vector<double>& values);      // an array of numbers
  JsonObject& add(std::string_view key, const std::vector<std::int64_t>& values);
  JsonObject& add(std::string_view key, const std::vector<std::string>& values);  // an array of strings
  // `json` must be one valid JSON value (e.g. another program's report); it is parsed
  // (throws std::runtime_error if it is not) and nested as a value, never pasted.
  JsonObject& add_json(std::string_view key, std::string_view json);
  JsonObject& add_json(std::string_view key, const std::vector<std::string>& jsons);  // an array of them
  JsonObject& add_null(std::string_view key);
  bool empty() const;
  std::string str() const;

  const nlohmann::ordered_json& value() const { return *j_; }

 private:
  std::unique_ptr<nlohmann::ordered_json> j_;
};

}  // namespace ringattn::cli
