// parse_json (json_value.hpp) on nlohmann::json's SAX parser: nlohmann's lexer and
// grammar (strict RFC 8259, UTF-8 checked), our JsonValue tree, and the depth bound
// applied as each array or object opens, before anything inside it is read.
#include "src/cli/json_value.hpp"

#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

namespace ringattn::cli {

const JsonValue* JsonValue::get(std::string_view key) const {
  for (const auto& [k, v] : fields)
    if (k == key) return &v;
  return nullptr;
}

namespace {

using Json = nlohmann::json;

// Where the first array or object deeper than kMaxJsonDepth opens (for the error only).
std::size_t too_deep_at(std::string_view t) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return t.size();
}

// Builds the JsonValue tree from nlohmann's SAX events. open_ holds the arrays and
// objects not yet closed (at most kMaxJsonDepth); key_ the key of the next field.
class Builder : public nlohmann::json_sax<Json> {
 public:
  JsonValue result;
  bool too_deep = false;
  std::string error;

  bool null() override { return put(JsonValue{}); }
  bool boolean(bool v) override {
    JsonValue j;
    j.kind = JsonValue::Kind::boolean;
    j.boolean = v;
    return put(std::move(j));
  }
  bool number_integer(number_integer_t v) override { return number(static_cast<double>(v)); }
  bool number_unsigned(number_unsigned_t v) override { return number(static_cast<double>(v)); }
  bool number_float(number_float_t v, const string_t&) override { return number(v); }
  bool string(string_t& v) override {
    JsonValue j;
    j.kind = JsonValue::Kind::string;
    j.string = std::move(v);
    return put(std::move(j));
  }
  bool binary(binary_t&) override { return false; }  // not in JSON text
  bool start_object(std::size_t) override { return open(JsonValue::Kind::object); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(JsonValue::Kind::array); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    // nlohmann's message starts "[json.exception.parse_error.101] parse error at line 1, column N: ..."
    std::string what = e.what();
    const auto colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    error = "invalid JSON at offset " + std::to_string(position > 0 ? position - 1 : 0) + ": " + what;
    return false;
  }

 private:
  bool number(double v) {
    JsonValue j;
    j.kind = JsonValue::Kind::number;
    j.number = v;
    return put(std::move(j));
  }
  bool open(JsonValue::Kind kind) {
    if (static_cast<int>(open_.size()) >= kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    JsonValue j;
    j.kind = kind;
    open_.emplace_back(std::move(key_), std::move(j));
    return true;
  }
  bool close() {
    auto [k, v] = std::move(open_.back());
    open_.pop_back();
    key_ = std::move(k);
    return put(std::move(v));
  }
  bool put(JsonValue v) {
    if (open_.empty()) result = std::move(v);
    else if (open_.back().second.kind == JsonValue::Kind::array) open_.back().second.items.push_back(std::move(v));
    else open_.back().second.fields.emplace_back(std::move(key_), std::move(v));
    return true;
  }

  std::vector<std::pair<std::string, JsonValue>> open_;
  std::string key_;
};

}  // namespace

JsonValue parse_json(std::string_view text) {
  Builder b;
  const bool ok = Json::sax_parse(text.begin(), text.end(), &b, Json::input_format_t::json, /*strict=*/true);
  if (b.too_deep)
    throw std::runtime_error("invalid JSON at offset " + std::to_string(too_deep_at(text)) + ": nested deeper than " +
                             std::to_string(kMaxJsonDepth) + " levels");
  if (!ok) throw std::runtime_error(b.error.empty() ? "invalid JSON" : b.error);
  return std::move(b.result);
}

std::optional<std::string> json_member(std::string_view json, std::string_view key) {
  if (parse_json(json).kind != JsonValue::Kind::object) throw std::runtime_error("JSON: expected an object");
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(json.begin(), json.end());
  const auto it = j.find(std::string(key));
  if (it == j.end()) return std::nullopt;
  return it->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace ringattn::cli
