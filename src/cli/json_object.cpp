#include "json_object.hpp"

#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "../../infer/common/json.hpp"

namespace ringattn::cli {

namespace {

using Json = nlohmann::ordered_json;

// Compact, and never throwing on bytes that are not UTF-8 (a prompt id, a path, an error
// from the system): they become U+FFFD.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

}  // namespace

std::string json_quote(std::string_view s) { return dump(Json(std::string(s))); }

JsonObject::JsonObject() : j_(std::make_unique<Json>(Json::object())) {}
JsonObject::~JsonObject() = default;
JsonObject::JsonObject(const JsonObject& other) : j_(std::make_unique<Json>(*other.j_)) {}
JsonObject& JsonObject::operator=(const JsonObject& other) {
  if (this != &other) *j_ = *other.j_;
  return *this;
}
// A moved-from object stays usable (empty), as any value type's.
JsonObject::JsonObject(JsonObject&& other) : j_(std::make_unique<Json>(std::move(*other.j_))) {
  *other.j_ = Json::object();
}
JsonObject& JsonObject::operator=(JsonObject&& other) {
  if (this != &other) {
    *j_ = std::move(*other.j_);
    *other.j_ = Json::object();
  }
  return *this;
}

JsonObject& JsonObject::add(std::string_view key, std::string_view value) {
  (*j_)[std::string(key)] = std::string(value);
  return *this;
}
JsonObject& JsonObject::add(std::string_view key, double value) {
  (*j_)[std::string(key)] = number(value);
  return *this;
}
JsonObject& JsonObject::add(std::string_view key, std::int64_t value) {
  (*j_)[std::string(key)] = value;
  return *this;
}
JsonObject& JsonObject::add(std::string_view key, std::uint64_t value) {
  (*j_)[std::string(key)] = value;
  return *this;
}
JsonObject& JsonObject::add(std::string_view key, bool value) {
  (*j_)[std::string(key)] = value;
  return *this;
}
JsonObject& JsonObject::add(std::string_view key, const JsonObject& value) {
  (*j_)[std::string(key)] = *value.j_;
  return *this;
}
JsonObject& JsonObject::add(std::string_view key, const std::vector<JsonObject>& values) {
  Json a = Json::array();
  for (const auto& v : values) a.push_back(*v.j_);
  (*j_)[std::string(key)] = std::move(a);
  return *this;
}
JsonObject& JsonObject::add(std::string_view key, const std::vector<double>& values) {
  Json a = Json::array();
  for (double v : values) a.push_back(number(v));
  (*j_)[std::string(key)] = std::move(a);
  return *this;
}
JsonObject& JsonObject::add(std::string_view key, const std::vector<std::int64_t>& values) {
  (*j_)[std::string(key)] = values;
  return *this;
}
JsonObject& JsonObject::add(std::string_view key, const std::vector<std::string>& values) {
  (*j_)[std::string(key)] = values;
  return *this;
}
JsonObject& JsonObject::add_json(std::string_view key, std::string_view json) {
  (*j_)[std::string(key)] = infer::parse_json(json);  // the same strict, depth-bounded reader as for any input
  return *this;
}
JsonObject& JsonObject::add_json(std::string_view key, const std::vector<std::string>& jsons) {
  Json a = Json::array();
  for (const auto& j : jsons) {
    a.push_back(infer::parse_json(j));
  }
  (*j_)[std::string(key)] = std::move(a);
  return *this;
}
JsonObject& JsonObject::add_null(std::string_view key) {
  (*j_)[std::string(key)] = nullptr;
  return *this;
}

bool JsonObject::empty() const { return j_->empty(); }

std::string JsonObject::str() const { return dump(*j_); }

std::string json_array(const std::vector<JsonObject>& values) {
  Json a = Json::array();
  for (const auto& v : values) a.push_back(v.value());
  return dump(a);
}

}  // namespace ringattn::cli
