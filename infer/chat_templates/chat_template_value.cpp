// infer — a chat template's values and their budget (chat_template_value.hpp): Python's
// truth, equality and str() as Jinja shows them, every one counted against the render's
// limits before it makes or reads anything large.
#include "chat_template_value.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "../common/unicode.hpp"

namespace infer::jinja {

namespace {

// Thrown by the printers below when their text passes the cap; the caller names the line.
struct TooLong {};

void append(std::string& out, std::string_view s, std::size_t cap) {
  if (s.size() > cap - std::min(cap, out.size())) throw TooLong{};
  out += s;
}

// Python's repr() of a string. Non-printable characters are escaped as Python does for the
// controls (C0, DEL, C1), the separators and spaces other than ' ', and the common format
// characters (soft hyphen, zero-width, word joiners, BOM); Python's full printable table
// (every Cf, Co, Cn code point) is not reproduced.
void py_repr_string(const std::string& s, std::string& out, std::size_t cap) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  append(out, std::string_view(&q, 1), cap);
  std::string piece;
  for (std::size_t at = 0; at < s.size();) {
    const char32_t c = unicode::next_utf8(s, at);
    char buf[16];
    piece.clear();
    if (c == static_cast<char32_t>(q) || c == U'\\') {
      piece += '\\';
      piece += static_cast<char>(c);
    } else if (c == U'\n') {
      piece = "\\n";
    } else if (c == U'\r') {
      piece = "\\r";
    } else if (c == U'\t') {
      piece = "\\t";
    } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      piece = buf;
    } else if ((c != U' ' && py_space(c)) || (c >= 0x200B && c <= 0x200F) || (c >= 0x2060 && c <= 0x2064) || c == 0xFEFF) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      piece = buf;
    } else {
      unicode::append_utf8(piece, c);
    }
    append(out, piece, cap);
  }
  append(out, std::string_view(&q, 1), cap);
}

// str() of a value as Python prints it (Jinja's output); repr for items of a list or dict.
void py_str(const Json& v, bool repr, std::string& out, std::size_t cap) {
  switch (v.type()) {
    case Json::value_t::null: return append(out, "None", cap);
    case Json::value_t::boolean: return append(out, v.get<bool>() ? "True" : "False", cap);
    case Json::value_t::number_integer: return append(out, std::to_string(v.get<std::int64_t>()), cap);
    case Json::value_t::number_unsigned: return append(out, std::to_string(v.get<std::uint64_t>()), cap);
    case Json::value_t::number_float: return append(out, py_float(v.get<double>()), cap);
    case Json::value_t::string:
      if (repr) return py_repr_string(v.get_ref<const std::string&>(), out, cap);
      return append(out, v.get_ref<const std::string&>(), cap);
    case Json::value_t::array:
      append(out, "[", cap);
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) append(out, ", ", cap);
        py_str(v[i], true, out, cap);
      }
      return append(out, "]", cap);
    case Json::value_t::object: {
      append(out, "{", cap);
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) append(out, ", ", cap);
        py_repr_string(k, out, cap);
        append(out, ": ", cap);
        py_str(x, true, out, cap);
        first = false;
      }
      return append(out, "}", cap);
    }
    default: return;
  }
}

void json_string(const std::string& s, std::string& out, std::size_t cap) {
  std::string piece = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': piece += "\\\""; break;
      case '\\': piece += "\\\\"; break;
      case '\n': piece += "\\n"; break;
      case '\r': piece += "\\r"; break;
      case '\t': piece += "\\t"; break;
      case '\b': piece += "\\b"; break;
      case '\f': piece += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
          piece += buf;
        } else {
          piece += c;
        }
    }
    if (piece.size() >= 4096) {
      append(out, piece, cap);
      piece.clear();
    }
  }
  piece += '"';
  append(out, piece, cap);
}

// Python's json.dumps(v, ensure_ascii=False[, indent=N]). With an indent, items go on their
// own lines and are separated by "," (Python's default then).
void py_json(const Json& v, int indent, int level, std::string& out, std::size_t cap) {
  std::string pad, close;  // (built by append: GCC 12 warns falsely on "\n" + std::string)
  if (indent >= 0) {
    pad.append(1, '\n').append(static_cast<std::size_t>(indent * (level + 1)), ' ');
    close.append(1, '\n').append(static_cast<std::size_t>(indent * level), ' ');
  }
  const char* comma = indent < 0 ? ", " : ",";
  switch (v.type()) {
    case Json::value_t::null: return append(out, "null", cap);
    case Json::value_t::boolean: return append(out, v.get<bool>() ? "true" : "false", cap);
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      if (std::isnan(d)) return append(out, "NaN", cap);
      if (std::isinf(d)) return append(out, d > 0 ? "Infinity" : "-Infinity", cap);
      return append(out, py_float(d), cap);
    }
    case Json::value_t::string: return json_string(v.get_ref<const std::string&>(), out, cap);
    case Json::value_t::array:
      if (v.empty()) return append(out, "[]", cap);
      append(out, "[", cap);
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) append(out, comma, cap);
        append(out, pad, cap);
        py_json(v[i], indent, level + 1, out, cap);
      }
      append(out, close, cap);
      return append(out, "]", cap);
    case Json::value_t::object: {
      if (v.empty()) return append(out, "{}", cap);
      append(out, "{", cap);
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) append(out, comma, cap);
        append(out, pad, cap);
        json_string(k, out, cap);
        append(out, ": ", cap);
        py_json(x, indent, level + 1, out, cap);
        first = false;
      }
      append(out, close, cap);
      return append(out, "}", cap);
    }
    default: return append(out, v.dump(), cap);
  }
}

}  // namespace

Budget::Budget(const std::string& where, const RenderLimits& limits)
    : where_(where), limits_(limits), deadline_(std::chrono::steady_clock::now() + limits.time) {}

void Budget::fail(int line, const std::string& what) const {
  throw std::runtime_error("chat template " + where_ + ": line " + std::to_string(line) + ": " + what);
}

void Budget::clock(int line) const {
  if (std::chrono::steady_clock::now() >= deadline_)
    fail(line, "takes longer than " + std::to_string(limits_.time.count()) + " ms to render (the render's time limit)");
}

void Budget::step(int line) {
  if (++stats_.steps > limits_.steps)
    fail(line, "runs more than " + (limits_.steps % 1'000'000 == 0 ? std::to_string(limits_.steps / 1'000'000) + " million"
                                                                   : std::to_string(limits_.steps)) + " steps");
  if (stats_.steps % 256 == 1) clock(line);  // (the first step too: a render given no time refuses at once)
}

// (A refused charge is not counted: the stats say what the render did make and touch.)
void Budget::work(std::uint64_t bytes, int line) {
  const std::uint64_t before = stats_.work_bytes;
  if (bytes > limits_.work_bytes - std::min(before, limits_.work_bytes))
    fail(line, "reads or makes more than " + std::to_string(limits_.work_bytes >> 20) + " MiB of strings and lists in all (the render's work limit)");
  stats_.work_bytes += bytes;
  if ((before >> 20) != (stats_.work_bytes >> 20)) clock(line);  // a clock look for every MiB touched
}

void Budget::made(std::uint64_t bytes, int line) {
  if (bytes > limits_.made_bytes - std::min(stats_.made_bytes, limits_.made_bytes))
    fail(line, "makes more than " + std::to_string(limits_.made_bytes >> 20) + " MiB of strings and lists in all (the render's memory limit)");
  work(bytes, line);
  stats_.made_bytes += bytes;
}

void Budget::size(std::uint64_t n, int line) const {
  if (n > limits_.value_size)
    fail(line, "makes a string or list larger than " + std::to_string(limits_.value_size >> 20) + " Mi");
}

Value Value::of(Json v) {
  Value x;
  x.kind = Kind::json;
  x.owner = std::make_shared<const Json>(std::move(v));
  x.p = x.owner.get();
  return x;
}

Value Value::at(const Value& whole, const Json& part) {
  Value x;
  x.kind = Kind::json;
  x.owner = whole.owner;
  x.p = &part;
  return x;
}

Value Value::ref(const Json& v) {
  Value x;
  x.kind = Kind::json;
  x.p = &v;
  return x;
}

Value Value::missing(std::string n) {
  Value x;
  x.name = std::move(n);
  return x;
}

std::uint64_t footprint(const Json& v, Budget& b, int line) {
  std::uint64_t bytes = 0;
  std::vector<std::pair<const Json*, int>> pending{{&v, 0}};
  while (!pending.empty()) {
    const auto [x, d] = pending.back();
    pending.pop_back();
    if (d > 128) b.fail(line, "makes lists or dicts nested more than 128 deep");
    bytes += kNodeBytes;
    if (x->is_string()) bytes += x->get_ref<const std::string&>().size();
    if (x->is_object())
      for (const auto& [k, c] : x->items()) {
        bytes += k.size() + kNodeBytes;
        if (c.is_structured()) pending.emplace_back(&c, d + 1);
        else bytes += kNodeBytes + (c.is_string() ? c.get_ref<const std::string&>().size() : 0);
      }
    else if (x->is_array())
      for (const Json& c : *x) {
        if (c.is_structured()) pending.emplace_back(&c, d + 1);
        else bytes += kNodeBytes + (c.is_string() ? c.get_ref<const std::string&>().size() : 0);
      }
    b.work(kNodeBytes * (x->is_structured() ? x->size() : 1), line);  // looking is work too
  }
  return bytes;
}

Value Value::boolean(bool b) {
  static const Json kTrue = true, kFalse = false;
  return ref(b ? kTrue : kFalse);
}

Value Value::integer(std::int64_t i) {
  static const std::vector<Json> kSmall = [] {
    std::vector<Json> v;
    for (std::int64_t k = -1; k < 4096; ++k) v.emplace_back(k);
    return v;
  }();
  if (i >= -1 && i < 4096) return ref(kSmall[static_cast<std::size_t>(i + 1)]);
  return of(i);
}

Value Value::loop(std::int64_t index0, std::int64_t length) {
  Value x;
  x.kind = Kind::loop;
  x.index0 = index0;
  x.length = length;
  return x;
}

bool py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = Json(d).dump();  // shortest round trip, as Python's repr
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  const auto e = s.find('e');
  if (e != std::string::npos && s[e + 1] != '-' && s[e + 1] != '+') s.insert(e + 1, "+");
  return s;
}

bool is_int(const Json& j) {
  return j.is_number_integer() && !(j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX));
}

bool truth(const Value& v) {
  if (v.undefined()) return false;
  if (v.kind == Value::Kind::ns || v.kind == Value::Kind::loop) return true;
  const Json& j = v.j();
  switch (j.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return j.get<bool>();
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return j.get<std::int64_t>() != 0;
    case Json::value_t::number_float: return j.get<double>() != 0;
    case Json::value_t::string: return !j.get_ref<const std::string&>().empty();  // (json::empty() is false for every string)
    case Json::value_t::array:
    case Json::value_t::object: return !j.empty();
    default: return false;
  }
}

int compare(const Json& a, const Json& b, bool& ok) {
  ok = true;
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  ok = false;
  return 0;
}

bool equal(const Value& a, const Value& b, Budget& budget, int line) {
  if (a.undefined() || b.undefined()) return a.undefined() && b.undefined();
  if (a.kind == Value::Kind::loop || b.kind == Value::Kind::loop)
    return a.kind == b.kind && a.index0 == b.index0 && a.length == b.length;
  if (a.kind == Value::Kind::ns || b.kind == Value::Kind::ns) return a.ns == b.ns;
  if (a.p == b.p) return true;
  const Json &x = a.j(), &y = b.j();
  if (x.is_boolean() != y.is_boolean() && x.is_number() != y.is_number()) return false;
  if (x.is_number() && y.is_number()) return x.get<double>() == y.get<double>();
  if (x.is_string() && y.is_string()) {
    const auto &s = x.get_ref<const std::string&>(), &t = y.get_ref<const std::string&>();
    if (s.size() != t.size()) return false;
    budget.work(s.size(), line);
    return s == t;
  }
  if (x.type() != y.type()) return false;
  if (x.is_structured()) budget.work(std::min(footprint(x, budget, line), footprint(y, budget, line)), line);
  return x == y;
}

bool contains(const Value& item, const Value& in, Budget& budget, int line) {
  if (in.undefined()) return false;  // Jinja: nothing is in an undefined value
  const Json& c = need(in, budget, line);
  if (c.is_string()) {
    const std::string& needle = need_string(item, budget, line, "'in' a string");
    budget.work(c.get_ref<const std::string&>().size() + needle.size(), line);
    return find_text(c.get_ref<const std::string&>(), needle, 0) != std::string::npos;
  }
  if (c.is_array()) {
    for (const Json& x : c) {
      budget.work(kNodeBytes, line);
      if (equal(item, Value::at(in, x), budget, line)) return true;
    }
    return false;
  }
  if (c.is_object()) {
    const Json& k = need(item, budget, line);
    budget.work(kNodeBytes * c.size(), line);  // (an ordered dict looks its keys up one by one)
    return k.is_string() && c.contains(k.get_ref<const std::string&>());
  }
  budget.fail(line, "'in' needs a string, list or dict, not " + brief(c));
}

std::string str(const Value& v, Budget& b, int line) {
  if (v.undefined()) return "";
  if (v.kind == Value::Kind::ns) b.fail(line, "a namespace cannot be printed");
  if (v.kind == Value::Kind::loop) b.fail(line, "a loop cannot be printed");
  const std::size_t cap = b.limits().value_size;
  std::string s;
  try {
    if (v.view.empty()) {
      if (v.j().is_string()) {  // (the common case: one copy, its size known)
        b.made(v.j().get_ref<const std::string&>().size(), line);
        return v.j().get<std::string>();
      }
      py_str(v.j(), false, s, cap);
    } else {
      append(s, v.view + "([", cap);  // dict_items([('a', 1)])
      for (std::size_t i = 0; i < v.j().size(); ++i) {
        if (i) append(s, ", ", cap);
        if (v.view != "dict_items") {
          py_str(v.j()[i], true, s, cap);
          continue;
        }
        append(s, "(", cap);
        py_str(v.j()[i][0], true, s, cap);
        append(s, ", ", cap);
        py_str(v.j()[i][1], true, s, cap);
        append(s, ")", cap);
      }
      append(s, "])", cap);
    }
  } catch (const TooLong&) {
    b.size(cap + 1, line);
  }
  b.made(s.size(), line);
  return s;
}

std::string to_json(const Json& v, int indent, Budget& b, int line) {
  const std::size_t cap = b.limits().value_size;
  std::string s;
  try {
    py_json(v, indent, 0, s, cap);
  } catch (const TooLong&) {
    b.size(cap + 1, line);
  }
  b.made(s.size(), line);
  return s;
}

std::string brief(const Json& v) {
  constexpr std::size_t kShown = 200;
  if (v.is_string() && v.get_ref<const std::string&>().size() > kShown) {
    std::string head = v.get_ref<const std::string&>().substr(0, kShown);
    head.resize(unicode::complete_utf8_prefix(head));
    std::string out;
    py_repr_string(head, out, kShown * 8);
    return out + "... (a string of " + std::to_string(v.get_ref<const std::string&>().size()) + " bytes)";
  }
  std::string out;
  try {
    py_str(v, true, out, kShown);
  } catch (const TooLong&) {
    return std::string(v.is_array() ? "a list of " : "a dict of ") + std::to_string(v.size()) + " items";
  }
  return out;
}

const Json& need(const Value& v, Budget& b, int line) {
  if (v.undefined()) b.fail(line, "'" + v.name + "' is undefined");
  if (v.kind == Value::Kind::ns) b.fail(line, "a namespace is used as a value");
  if (v.kind == Value::Kind::loop) b.fail(line, "a loop is used as a value (read its attributes: loop.index, ...)");
  return v.j();
}

const std::string& need_string(const Value& v, Budget& b, int line, const char* what) {
  const Json& j = need(v, b, line);
  if (!j.is_string()) b.fail(line, std::string(what) + " needs a string, not " + brief(j));
  return j.get_ref<const std::string&>();
}

std::int64_t need_int(const Value& v, Budget& b, int line, const char* what) {
  const Json& j = need(v, b, line);
  if (is_int(j)) return j.get<std::int64_t>();
  if (j.is_boolean()) return j.get<bool>();
  b.fail(line, std::string(what) + " needs an integer, not " + brief(j));
}

std::size_t count_chars(std::string_view s) {
  std::size_t n = 0;
  for (std::size_t at = 0; at < s.size(); ++n) (void)unicode::next_utf8(s, at);
  return n;
}

std::string char_at(std::string_view s, std::size_t& at) {
  std::string out;
  unicode::append_utf8(out, unicode::next_utf8(s, at));
  return out;
}

std::size_t find_text(std::string_view hay, std::string_view needle, std::size_t from) {
  if (from > hay.size()) return std::string::npos;
  if (needle.empty()) return from;
  const void* hit = ::memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
  return hit ? static_cast<std::size_t>(static_cast<const char*>(hit) - hay.data()) : std::string::npos;
}

std::u32string decode(std::string_view s, Budget& b, int line) {
  b.made(4 * static_cast<std::uint64_t>(s.size()), line);
  return unicode::decode_utf8(s);
}

std::string encode(const std::u32string& s, Budget& b, int line) {
  b.made(4 * static_cast<std::uint64_t>(s.size()), line);
  return unicode::encode_utf8(s);
}

}  // namespace infer::jinja
