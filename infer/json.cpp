// infer — the JSON reader on nlohmann::json's SAX parser (nlohmann-json3-dev: strict RFC
// 8259, UTF-8 checked): our Json tree, numbers as their text, depth bounded as each array
// or object opens, a repeated key refused, errors at the byte where they begin.
#include "json.hpp"

#include <charconv>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

namespace infer {

namespace {

constexpr int kMaxDepth = 64;

using Sax = nlohmann::json_sax<nlohmann::json>;

class Builder : public Sax {
 public:
  explicit Builder(std::string_view text) : text_(text) {}

  Json result;
  std::string error;  // set when the parse stopped

  bool null() override { return put(Json{}); }
  bool boolean(bool v) override {
    Json j;
    j.kind = Json::Kind::boolean;
    j.boolean = v;
    return put(std::move(j));
  }
  bool number_integer(number_integer_t v) override { return number(std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override { return number(std::to_string(v)); }
  bool number_float(number_float_t, const string_t& literal) override { return number(literal); }
  bool string(string_t& v) override {
    Json j;
    j.kind = Json::Kind::string;
    j.text = std::move(v);
    return put(std::move(j));
  }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return open(Json::Kind::object); }
  bool key(string_t& k) override {
    if (open_.back().second.fields.count(k)) return stop("repeated key \"" + k + "\"", unknown_offset());
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Json::Kind::array); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column N: ..."
    const auto colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    std::size_t at = position > 0 ? position - 1 : 0;  // the byte nlohmann stopped at
    if (what.find("UTF-8") != std::string::npos) {
      what = "invalid UTF-8 in a string";
      at = sequence_start(at);
    }
    return stop(what, at);
  }

 private:
  // Where the UTF-8 sequence that byte `at` ends (or breaks) begins.
  std::size_t sequence_start(std::size_t at) const {
    auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text_[i]); };
    if (at < text_.size() && byte(at) < 0x80 && at > 0) --at;  // an ASCII byte cut a sequence short
    while (at > 0 && at < text_.size() && (byte(at) & 0xC0) == 0x80) --at;
    return at;
  }
  static constexpr std::size_t unknown_offset() { return std::string::npos; }
  bool stop(const std::string& what, std::size_t at) {
    error = "JSON" + (at == std::string::npos ? std::string() : " at byte " + std::to_string(at)) + ": " + what;
    return false;
  }
  bool number(std::string literal) {
    Json j;
    j.kind = Json::Kind::number;
    j.text = std::move(literal);
    return put(std::move(j));
  }
  bool open(Json::Kind kind) {
    if (static_cast<int>(open_.size()) >= kMaxDepth) return stop("nested deeper than 64", depth_offset());
    Json j;
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
  bool put(Json v) {
    if (open_.empty()) result = std::move(v);
    else if (open_.back().second.kind == Json::Kind::array) open_.back().second.items.push_back(std::move(v));
    else open_.back().second.fields.emplace(std::move(key_), std::move(v));
    return true;
  }
  // Where the first array or object deeper than kMaxDepth opens.
  std::size_t depth_offset() const {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (std::size_t i = 0; i < text_.size(); ++i) {
      const char c = text_[i];
      if (in_string) {
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '[' || c == '{') {
        if (++depth > kMaxDepth) return i;
      } else if (c == ']' || c == '}') {
        --depth;
      }
    }
    return text_.size();
  }

  std::string_view text_;
  std::vector<std::pair<std::string, Json>> open_;
  std::string key_;
};

}  // namespace

std::int64_t Json::as_int(std::string_view what, std::int64_t lo, std::int64_t hi) const {
  std::int64_t x = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, x);
  if (kind != Kind::number || ec != std::errc() || p != end || x < lo || x > hi)
    throw std::runtime_error(std::string(what) + " must be an integer in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "], got " + (kind == Kind::number ? text : "a non-number"));
  return x;
}

const Json* Json::find(const std::string& key) const {
  if (kind != Kind::object) return nullptr;
  const auto it = fields.find(key);
  return it == fields.end() ? nullptr : &it->second;
}

Json parse_json(std::string_view text) {
  Builder b(text);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &b, nlohmann::json::input_format_t::json, true);
  if (!ok) throw std::runtime_error(b.error.empty() ? std::string("JSON: invalid") : b.error);
  return std::move(b.result);
}

}  // namespace infer
