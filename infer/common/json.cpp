// infer — the strict JSON reader (json.hpp): nlohmann's parser with a callback that bounds
// the depth and refuses repeated keys as the text is read.
#include "json.hpp"

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace infer {
namespace {

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

struct TooDeep {};
struct RepeatedKey {
  std::string key;
};

}  // namespace

namespace {

template <class J>
J parse_strict(std::string_view text) {
  // One entry per open array or object: an object's keys so far (an array's set stays empty).
  std::vector<std::set<std::string>> open;
  const typename J::parser_callback_t check = [&](int, nlohmann::json::parse_event_t event, J& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (static_cast<int>(open.size()) >= kMaxJsonDepth) throw TooDeep{};
        open.emplace_back();
        break;
      case E::object_end:
      case E::array_end:
        open.pop_back();
        break;
      case E::key:
        if (!open.back().insert(parsed.template get<std::string>()).second) throw RepeatedKey{parsed.template get<std::string>()};
        break;
      case E::value:
        break;
    }
    return true;
  };
  try {
    return J::parse(text.begin(), text.end(), check);
  } catch (const TooDeep&) {
    throw std::runtime_error("invalid JSON at offset " + std::to_string(too_deep_at(text)) + ": nested deeper than " +
                             std::to_string(kMaxJsonDepth) + " levels");
  } catch (const RepeatedKey& k) {
    throw std::runtime_error("invalid JSON: the key \"" + k.key + "\" appears twice in one object");
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message starts "[json.exception.parse_error.101] parse error at line 1, column N: ..."
    std::string what = e.what();
    const auto colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    throw std::runtime_error("invalid JSON at offset " + std::to_string(e.byte > 0 ? e.byte - 1 : 0) + ": " + what);
  } catch (const nlohmann::json::exception& e) {  // a number beyond a double (1e400), ...
    std::string what = e.what();
    const auto bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    throw std::runtime_error("invalid JSON: " + what);
  }
}

}  // namespace

Json parse_json(std::string_view text) { return parse_strict<Json>(text); }
JsonMap parse_json_map(std::string_view text) { return parse_strict<JsonMap>(text); }

template <class J>
std::int64_t json_int(const J& j, std::string_view what, std::int64_t lo, std::int64_t hi) {
  std::string got = "a non-number";
  if (j.is_number_integer()) {
    if (j.is_number_unsigned()) {
      const std::uint64_t u = j.template get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(INT64_MAX) && static_cast<std::int64_t>(u) >= lo && static_cast<std::int64_t>(u) <= hi)
        return static_cast<std::int64_t>(u);
      got = std::to_string(u);
    } else {
      const std::int64_t x = j.template get<std::int64_t>();
      if (x >= lo && x <= hi) return x;
      got = std::to_string(x);
    }
  } else if (j.is_number()) {
    got = j.dump();
  }
  throw std::runtime_error(std::string(what) + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "], got " + got);
}

template std::int64_t json_int(const Json&, std::string_view, std::int64_t, std::int64_t);
template std::int64_t json_int(const JsonMap&, std::string_view, std::int64_t, std::int64_t);

template <class J>
const J* json_field(const J& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(std::string(key));
  return it == j.end() ? nullptr : &*it;
}

template const Json* json_field(const Json&, std::string_view);
template const JsonMap* json_field(const JsonMap&, std::string_view);

const std::string* json_string(const Json& j, std::string_view key) {
  const Json* f = json_field(j, key);
  return f && f->is_string() ? f->get_ptr<const std::string*>() : nullptr;
}

std::optional<double> json_number(const Json& j, std::string_view key) {
  const Json* f = json_field(j, key);
  if (!f || !f->is_number()) return std::nullopt;
  return f->get<double>();
}

}  // namespace infer
