#include "src/cli/json_object.hpp"

#include <cmath>
#include <cstdio>

namespace ringattn::cli {

std::string json_quote(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      o += buf;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

std::string JsonObject::str() const {
  std::string o;
  o.reserve(body_.size() + 2);
  o += '{';
  o += body_;
  o += '}';
  return o;
}

JsonObject& JsonObject::raw(std::string_view key, std::string_view json) {
  if (!body_.empty()) body_ += ',';
  body_ += json_quote(key);
  body_ += ':';
  body_ += json;
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, std::string_view value) { return raw(key, json_quote(value)); }

JsonObject& JsonObject::add(std::string_view key, double value) {
  if (!std::isfinite(value)) return raw(key, "null");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", value);  // FLOP counts stay exact to 9 digits
  return raw(key, buf);
}

JsonObject& JsonObject::add(std::string_view key, std::int64_t value) { return raw(key, std::to_string(value)); }
JsonObject& JsonObject::add(std::string_view key, std::uint64_t value) { return raw(key, std::to_string(value)); }
JsonObject& JsonObject::add(std::string_view key, bool value) { return raw(key, value ? "true" : "false"); }
JsonObject& JsonObject::add(std::string_view key, const JsonObject& value) { return raw(key, value.str()); }

std::string json_array(const std::vector<JsonObject>& values) {
  std::string a = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) a += ',';
    a += values[i].str();
  }
  return a + "]";
}

JsonObject& JsonObject::add(std::string_view key, const std::vector<JsonObject>& values) {
  return raw(key, json_array(values));
}

JsonObject& JsonObject::add_null(std::string_view key) { return raw(key, "null"); }

}  // namespace ringattn::cli
