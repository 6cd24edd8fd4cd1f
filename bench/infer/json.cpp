// infer — the JSON reader: recursive descent over the text, one value per call.
#include "json.hpp"

#include <cctype>
#include <charconv>
#include <stdexcept>

namespace infer {

namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Json document() {
    Json v = value(0);
    skip_space();
    if (i_ != s_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON at byte " + std::to_string(i_) + ": " + what);
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  void literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) fail("unknown literal");
    i_ += word.size();
  }

  Json value(int depth) {
    if (depth > kMaxDepth) fail("nested deeper than 64");
    skip_space();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Json::Kind::object;
      ++i_;
      if (eat('}')) return v;
      do {
        skip_space();
        if (i_ >= s_.size() || s_[i_] != '"') fail("expected a key");
        std::string key = string();
        expect(':');
        if (!v.fields.emplace(key, value(depth + 1)).second) fail("repeated key \"" + key + "\"");
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      v.kind = Json::Kind::array;
      ++i_;
      if (eat(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::Kind::string;
      v.text = string();
    } else if (c == 't' || c == 'f') {
      v.kind = Json::Kind::boolean;
      v.boolean = c == 't';
      literal(v.boolean ? "true" : "false");
    } else if (c == 'n') {
      literal("null");
    } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      v.kind = Json::Kind::number;
      const std::size_t start = i_++;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' || s_[i_] == 'e' ||
                                s_[i_] == 'E' || s_[i_] == '+' || s_[i_] == '-'))
        ++i_;
      v.text = std::string(s_.substr(start, i_ - start));
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    return v;
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    unsigned x = 0;
    const auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + i_ + 4, x, 16);
    if (ec != std::errc() || p != s_.data() + i_ + 4) fail("bad \\u escape");
    i_ += 4;
    return x;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // The string's value, escapes decoded (\u and four hex digits, surrogate pairs joined, to UTF-8).
  std::string string() {
    ++i_;  // the opening quote
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (static_cast<unsigned char>(c) >= 0x80) {  // JSON text is UTF-8 (RFC 8259): check it, echo it intact
        --i_;
        utf8_sequence(out);
        continue;
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate: its low half must follow
            if (s_.substr(i_, 2) != "\\u") fail("lone surrogate in \\u escape");
            i_ += 2;
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("lone surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  // One UTF-8 encoded code point starting at i_, appended to out: the shortest form, no
  // surrogates, at most U+10FFFF. Anything else is refused, so that the job never copies
  // bytes into its output that make that output invalid JSON.
  void utf8_sequence(std::string& out) {
    const auto b0 = static_cast<unsigned char>(s_[i_]);
    const int len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
    if (len == 0 || b0 > 0xF4 || b0 == 0xC0 || b0 == 0xC1) fail("invalid UTF-8 in a string");
    if (i_ + static_cast<std::size_t>(len) > s_.size()) fail("truncated UTF-8 sequence in a string");
    unsigned cp = b0 & (0x7Fu >> len);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s_[i_ + static_cast<std::size_t>(k)]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in a string");
      cp = (cp << 6) | (b & 0x3Fu);
    }
    static constexpr unsigned kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) fail("invalid UTF-8 in a string");
    out.append(s_.substr(i_, static_cast<std::size_t>(len)));
    i_ += static_cast<std::size_t>(len);
  }

  std::string_view s_;
  std::size_t i_ = 0;
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

Json parse_json(std::string_view text) { return Parser(text).document(); }

}  // namespace infer
