// infer — rendering a parsed chat template (chat_template.hpp) as Jinja 3 renders it in
// transformers' sandbox: Python's truth, equality, string methods and str() of values.
#include "chat_template.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <stdexcept>

#include "chat_template_ast.hpp"
#include "unicode.hpp"

namespace infer {

namespace {

using namespace jinja;

constexpr std::size_t kMaxOutput = 16u << 20;  // bytes of output, and of any one string or list made while rendering
constexpr std::uint64_t kMaxSteps = 5'000'000;  // statements and expressions evaluated: no template runs for long

struct Value {
  enum class Kind { undefined, json, ns } kind = Kind::undefined;
  Json j;
  std::shared_ptr<std::map<std::string, Value>> ns;  // a namespace(): shared, so assignments show through copies
  std::string name;                                  // undefined: the name that was missing
  std::string view;                                  // a dict's keys(), values() or items(): printed as Python prints them
  static Value of(Json v) {
    Value x;
    x.kind = Kind::json;
    x.j = std::move(v);
    return x;
  }
  static Value missing(std::string n) {
    Value x;
    x.name = std::move(n);
    return x;
  }
  bool undefined() const { return kind == Kind::undefined; }
};

// Python's str.isspace.
bool py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's repr() of a string. Non-printable characters are escaped as Python does for the
// controls (C0, DEL, C1), the separators and spaces other than ' ', and the common format
// characters (soft hyphen, zero-width, word joiners, BOM); Python's full printable table
// (every Cf, Co, Cn code point) is not reproduced.
std::string py_repr_string(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (const char32_t c : unicode::decode_utf8(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(q) || c == U'\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if ((c != U' ' && py_space(c)) || (c >= 0x200B && c <= 0x200F) || (c >= 0x2060 && c <= 0x2064) || c == 0xFEFF) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      unicode::append_utf8(out, c);
    }
  }
  out += q;
  return out;
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

// str() of a value as Python prints it (Jinja's output); repr for items of a list or dict.
std::string py_str(const Json& v, bool repr) {
  switch (v.type()) {
    case Json::value_t::null: return "None";
    case Json::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer: return std::to_string(v.get<std::int64_t>());
    case Json::value_t::number_unsigned: return std::to_string(v.get<std::uint64_t>());
    case Json::value_t::number_float: return py_float(v.get<double>());
    case Json::value_t::string: return repr ? py_repr_string(v.get<std::string>()) : v.get<std::string>();
    case Json::value_t::array: {
      std::string s = "[";
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + py_str(v[i], true);
      return s + "]";
    }
    case Json::value_t::object: {
      std::string s = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        s += (first ? "" : ", ") + py_repr_string(k) + ": " + py_str(x, true);
        first = false;
      }
      return s + "}";
    }
    default: return "";
  }
}

// Python's json.dumps(v, ensure_ascii=False[, indent=N]): transformers' tojson. With an
// indent, items go on their own lines and are separated by "," (Python's default then).
std::string py_json(const Json& v, int indent = -1, int level = 0) {
  std::string pad, close;  // (built by append: GCC 12 warns falsely on "\n" + std::string)
  if (indent >= 0) {
    pad.append(1, '\n').append(static_cast<std::size_t>(indent * (level + 1)), ' ');
    close.append(1, '\n').append(static_cast<std::size_t>(indent * level), ' ');
  }
  const char* comma = indent < 0 ? ", " : ",";
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      if (std::isnan(d)) return "NaN";
      if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
      return py_float(d);
    }
    case Json::value_t::string: {
      std::string s = "\"";
      for (const char c : v.get_ref<const std::string&>()) {
        switch (c) {
          case '"': s += "\\\""; break;
          case '\\': s += "\\\\"; break;
          case '\n': s += "\\n"; break;
          case '\r': s += "\\r"; break;
          case '\t': s += "\\t"; break;
          case '\b': s += "\\b"; break;
          case '\f': s += "\\f"; break;
          default:
            if (static_cast<unsigned char>(c) < 0x20) {
              char buf[8];
              std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
              s += buf;
            } else {
              s += c;
            }
        }
      }
      return s + "\"";
    }
    case Json::value_t::array: {
      if (v.empty()) return "[]";
      std::string s = "[";
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? comma : "") + pad + py_json(v[i], indent, level + 1);
      return s + close + "]";
    }
    case Json::value_t::object: {
      if (v.empty()) return "{}";
      std::string s = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        s += (first ? "" : comma) + pad + py_json(Json(k)) + ": " + py_json(x, indent, level + 1);
        first = false;
      }
      return s + close + "}";
    }
    default: return v.dump();
  }
}

std::u32string chars(const std::string& s) { return unicode::decode_utf8(s); }
std::string utf8(const std::u32string& s) { return unicode::encode_utf8(s); }

class Renderer {
 public:
  Renderer(const std::string& where, const Json& context) : where_(where) {
    frames_.emplace_back();
    if (context.is_object())
      for (const auto& [k, v] : context.items()) frames_[0][k] = Value::of(v);
  }

  enum class Flow { normal, break_, continue_ };

  Flow body(const Body& b, std::string& out) {
    for (const Node& n : b) {
      const Flow f = node(n, out);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw std::runtime_error("chat template " + where_ + ": line " + std::to_string(line) + ": " + what);
  }

  void emit(std::string& out, const std::string& s, int line) {
    out += s;
    if (out.size() > kMaxOutput) fail(line, "renders more than 16 MiB");
  }

  void step(int line) {
    if (++steps_ > kMaxSteps) fail(line, "runs more than 5 million steps");
  }

  // `v`, which a list or pair is about to hold, once it is known to nest at most 128 deep
  // (values nest only through literals and items, so every value nests at most 129 and
  // what recurses through them is bounded); each element looked at counts as a step.
  const Json& shallow(const Json& v, int line) {
    std::vector<std::pair<const Json*, int>> pending{{&v, 0}};
    while (!pending.empty()) {
      const auto [x, d] = pending.back();
      pending.pop_back();
      if (d > 128) fail(line, "makes lists or dicts nested more than 128 deep");
      if (!x->is_structured()) continue;
      for (const Json& c : *x) {
        step(line);
        if (c.is_structured()) pending.emplace_back(&c, d + 1);
      }
    }
    return v;
  }

  Value sized(Json v, int line) const {
    if ((v.is_string() && v.get_ref<const std::string&>().size() > kMaxOutput) || (v.is_array() && v.size() > kMaxOutput))
      fail(line, "makes a string or list larger than 16 Mi");
    return Value::of(std::move(v));
  }

  Flow node(const Node& n, std::string& out) {
    step(n.line);
    switch (n.kind) {
      case Node::Kind::text: emit(out, n.text, n.line); return Flow::normal;
      case Node::Kind::output: emit(out, str(eval(*n.expr), n.line), n.line); return Flow::normal;
      case Node::Kind::if_:
        for (const auto& [cond, b] : n.branches)
          if (truth(eval(*cond))) return body(b, out);
        return body(n.otherwise, out);
      case Node::Kind::set: {
        Value v = eval(*n.expr);
        if (n.attr.empty()) {
          frames_.back()[n.text] = std::move(v);
        } else {
          const Value target = lookup(n.text);
          if (target.kind != Value::Kind::ns) fail(n.line, "'" + n.text + "' is not a namespace: cannot set ." + n.attr);
          (*target.ns)[n.attr] = std::move(v);
        }
        return Flow::normal;
      }
      case Node::Kind::for_: return loop(n, out);
      case Node::Kind::break_: return Flow::break_;
      case Node::Kind::continue_: return Flow::continue_;
    }
    return Flow::normal;
  }

  // A loop's {% else %}: its own scope, as the loop body's.
  Flow otherwise(const Node& n, std::string& out) {
    frames_.emplace_back();
    const Flow f = body(n.otherwise, out);
    frames_.pop_back();
    return f == Flow::normal ? f : Flow::normal;
  }

  Flow loop(const Node& n, std::string& out) {
    const Value seq = eval(*n.expr);
    std::vector<Json> items;
    if (seq.undefined()) return otherwise(n, out);  // Jinja: an undefined value iterates as empty
    const Json& j = seq.j;
    if (seq.kind == Value::Kind::ns) fail(n.line, "a namespace is not iterable");
    if (j.is_array()) items.assign(j.begin(), j.end());
    else if (j.is_object())
      for (const auto& [k, v] : j.items()) items.emplace_back(k);  // a dict iterates over its keys
    else if (j.is_string())
      for (const char32_t c : chars(j.get<std::string>())) items.emplace_back(utf8(std::u32string(1, c)));
    else fail(n.line, "cannot iterate over " + py_str(j, true));
    auto bind = [&](std::map<std::string, Value>& f, const Json& item) {
      if (n.targets.size() == 1) {
        f[n.targets[0]] = Value::of(item);
      } else {
        if (!item.is_array() || item.size() != n.targets.size()) fail(n.line, "cannot unpack " + py_str(item, true) + " into two names");
        for (std::size_t k = 0; k < n.targets.size(); ++k) f[n.targets[k]] = Value::of(item[k]);
      }
    };
    if (n.filter) {  // the loop's own "if": filtered before loop.* is counted
      std::vector<Json> kept;
      for (const Json& item : items) {
        step(n.line);
        frames_.emplace_back();
        bind(frames_.back(), item);
        const bool keep = truth(eval(*n.filter));
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return otherwise(n, out);
    const auto len = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < len; ++i) {
      step(n.line);  // (an empty body takes steps too)
      frames_.emplace_back();
      bind(frames_.back(), items[static_cast<std::size_t>(i)]);
      frames_.back()["loop"] = Value::of(Json{{"index", i + 1}, {"index0", i}, {"first", i == 0}, {"last", i + 1 == len},
                                              {"length", len}, {"revindex", len - i}, {"revindex0", len - i - 1}});
      const Flow f = body(n.branches[0].second, out);
      frames_.pop_back();
      if (f == Flow::break_) break;
    }
    return Flow::normal;
  }

  Value lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f)
      if (const auto it = f->find(name); it != f->end()) return it->second;
    return Value::missing(name);
  }

  static bool truth(const Value& v) {
    if (v.undefined()) return false;
    if (v.kind == Value::Kind::ns) return true;
    const Json& j = v.j;
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

  std::string str(const Value& v, int line) const {
    if (v.undefined()) return "";
    if (v.kind == Value::Kind::ns) fail(line, "a namespace cannot be printed");
    if (v.view.empty()) return py_str(v.j, false);
    std::string s = v.view + "([";  // dict_items([('a', 1)])
    for (std::size_t i = 0; i < v.j.size(); ++i) {
      s += i ? ", " : "";
      if (v.view != "dict_items") {
        s += py_str(v.j[i], true);
        continue;
      }
      s += '(';
      s += py_str(v.j[i][0], true);
      s += ", ";
      s += py_str(v.j[i][1], true);
      s += ')';
    }
    return s + "])";
  }

  const Json& need(const Value& v, int line) const {
    if (v.undefined()) fail(line, "'" + v.name + "' is undefined");
    if (v.kind == Value::Kind::ns) fail(line, "a namespace is used as a value");
    return v.j;
  }
  std::string need_string(const Value& v, int line, const char* what) const {
    const Json& j = need(v, line);
    if (!j.is_string()) fail(line, std::string(what) + " needs a string, not " + py_str(j, true));
    return j.get<std::string>();
  }
  // (A JSON integer past INT64_MAX reads as a float.)
  static bool is_int(const Json& j) {
    return j.is_number_integer() && !(j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX));
  }
  std::int64_t need_int(const Value& v, int line, const char* what) const {
    const Json& j = need(v, line);
    if (is_int(j)) return j.get<std::int64_t>();
    if (j.is_boolean()) return j.get<bool>();
    fail(line, std::string(what) + " needs an integer, not " + py_str(j, true));
  }

  // Python's index of `i` into a sequence of `n`: nullopt when out of range.
  static std::optional<std::size_t> index(std::int64_t i, std::size_t n) {
    if (i < 0) i += static_cast<std::int64_t>(n);
    if (i < 0 || i >= static_cast<std::int64_t>(n)) return std::nullopt;
    return static_cast<std::size_t>(i);
  }

  Value eval(const Expr& e) {
    step(e.line);
    switch (e.kind) {
      case Expr::Kind::literal: return Value::of(e.value);
      case Expr::Kind::name: return lookup(e.text);
      case Expr::Kind::list: {
        Json a = Json::array();
        for (const ExprPtr& x : e.args) a.push_back(shallow(need(eval(*x), e.line), e.line));
        return Value::of(std::move(a));
      }
      case Expr::Kind::dict: {
        Json o = Json::object();
        for (std::size_t i = 0; i < e.keys.size(); ++i) o[e.keys[i]] = shallow(need(eval(*e.args[i]), e.line), e.line);
        return Value::of(std::move(o));
      }
      case Expr::Kind::attribute: {
        const Value a = eval(*e.a);
        if (a.undefined()) fail(e.line, "'" + a.name + "' is undefined");
        if (a.kind == Value::Kind::ns) {
          if (const auto it = a.ns->find(e.text); it != a.ns->end()) return it->second;
          return Value::missing(e.text);
        }
        if (a.j.is_object())
          if (const auto it = a.j.find(e.text); it != a.j.end()) return Value::of(*it);
        return Value::missing(e.text);
      }
      case Expr::Kind::item: {
        const Value a = eval(*e.a);
        const Value k = eval(*e.b);
        if (a.undefined()) fail(e.line, "'" + a.name + "' is undefined");
        if (a.kind == Value::Kind::ns) fail(e.line, "a namespace has no items");
        const Json& key = need(k, e.line);
        if (a.j.is_object() && key.is_string()) {
          if (const auto it = a.j.find(key.get<std::string>()); it != a.j.end()) return Value::of(*it);
          return Value::missing(key.get<std::string>());
        }
        if ((a.j.is_array() || a.j.is_string()) && (is_int(key) || key.is_boolean())) {
          const std::int64_t i = need_int(k, e.line, "an index");
          if (a.j.is_array()) {
            const auto at = index(i, a.j.size());
            return at ? Value::of(a.j[*at]) : Value::missing(std::to_string(i));
          }
          const std::u32string s = chars(a.j.get<std::string>());
          const auto at = index(i, s.size());
          return at ? Value::of(utf8(std::u32string(1, s[*at]))) : Value::missing(std::to_string(i));
        }
        return Value::missing(py_str(key, false));
      }
      case Expr::Kind::slice: return slice(e);
      case Expr::Kind::conditional:
        if (truth(eval(*e.a))) return eval(*e.b);
        return e.c ? eval(*e.c) : Value::missing("(else)");
      case Expr::Kind::unary: {
        const Value a = eval(*e.a);
        if (e.text == "not") return Value::of(!truth(a));
        const Json& j = need(a, e.line);
        if (!j.is_number() || j.is_boolean()) fail(e.line, "unary " + e.text + " needs a number");
        if (e.text == "+") return Value::of(j);
        if (is_int(j) && j.get<std::int64_t>() == INT64_MIN) fail(e.line, "integer overflow (Python's integers are unbounded, this renderer's 64-bit)");
        return is_int(j) ? Value::of(-j.get<std::int64_t>()) : Value::of(-j.get<double>());
      }
      case Expr::Kind::binary: return binary(e);
      case Expr::Kind::filter: return filter(e);
      case Expr::Kind::test: return Value::of(test(e) != e.negated);
      case Expr::Kind::call: return call(e);
    }
    fail(e.line, "an expression this renderer does not know");
  }

  Value slice(const Expr& e) {
    const Value a = eval(*e.a);
    const Json& j = need(a, e.line);
    std::optional<std::int64_t> p[3];
    for (int k = 0; k < 3; ++k)
      if (e.args[static_cast<std::size_t>(k)]) {
        const Value v = eval(*e.args[static_cast<std::size_t>(k)]);
        if (!(v.kind == Value::Kind::json && v.j.is_null())) p[k] = need_int(v, e.line, "a slice");
      }
    const std::int64_t step = p[2].value_or(1);
    if (step == 0) fail(e.line, "a slice step cannot be zero");
    auto pick = [&](std::int64_t n) {  // Python's slice indices
      std::vector<std::int64_t> at;
      auto clamp = [&](std::optional<std::int64_t> x, std::int64_t def) {
        if (!x) return def;
        std::int64_t v = *x < 0 ? *x + n : *x;
        if (step > 0) return std::clamp<std::int64_t>(v, 0, n);
        return std::clamp<std::int64_t>(v, -1, n - 1);
      };
      const std::int64_t start = clamp(p[0], step > 0 ? 0 : n - 1), stop = clamp(p[1], step > 0 ? n : -1);
      for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
        at.push_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return at;
    };
    if (j.is_array()) {
      Json out = Json::array();
      for (const std::int64_t i : pick(static_cast<std::int64_t>(j.size()))) out.push_back(j[static_cast<std::size_t>(i)]);
      return Value::of(std::move(out));
    }
    if (j.is_string()) {
      const std::u32string s = chars(j.get<std::string>());
      std::u32string out;
      for (const std::int64_t i : pick(static_cast<std::int64_t>(s.size()))) out += s[static_cast<std::size_t>(i)];
      return Value::of(utf8(out));
    }
    fail(e.line, "cannot slice " + py_str(j, true));
  }

  static int compare_json(const Json& a, const Json& b, bool& ok) {
    ok = true;
    if (a.is_number() && b.is_number()) {
      const double x = a.get<double>(), y = b.get<double>();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) return a.get<std::string>().compare(b.get<std::string>()) < 0 ? -1 : a == b ? 0 : 1;
    ok = false;
    return 0;
  }

  static bool equal(const Value& a, const Value& b) {
    if (a.undefined() || b.undefined()) return a.undefined() && b.undefined();
    if (a.kind == Value::Kind::ns || b.kind == Value::Kind::ns) return a.ns == b.ns;
    if (a.j.is_boolean() != b.j.is_boolean() && a.j.is_number() != b.j.is_number()) return false;
    if (a.j.is_number() && b.j.is_number()) return a.j.get<double>() == b.j.get<double>();
    return a.j == b.j;
  }

  bool contains(const Value& item, const Value& in, int line) {
    if (in.undefined()) return false;  // Jinja: nothing is in an undefined value
    const Json& c = need(in, line);
    if (c.is_string()) return c.get<std::string>().find(need_string(item, line, "'in' a string")) != std::string::npos;
    if (c.is_array()) {
      for (const Json& x : c)
        if (equal(item, Value::of(x))) return true;
      return false;
    }
    if (c.is_object()) {
      const Json& k = need(item, line);
      return k.is_string() && c.contains(k.get<std::string>());
    }
    fail(line, "'in' needs a string, list or dict, not " + py_str(c, true));
  }

  Value binary(const Expr& e) {
    const std::string& op = e.text;
    if (op == "and") {
      Value a = eval(*e.a);
      return truth(a) ? eval(*e.b) : a;
    }
    if (op == "or") {
      Value a = eval(*e.a);
      return truth(a) ? a : eval(*e.b);
    }
    const Value a = eval(*e.a), b = eval(*e.b);
    if (op == "==") return Value::of(equal(a, b));
    if (op == "!=") return Value::of(!equal(a, b));
    if (op == "in") return Value::of(contains(a, b, e.line));
    if (op == "notin") return Value::of(!contains(a, b, e.line));
    if (op == "~") return sized(str(a, e.line) + str(b, e.line), e.line);
    const Json& x = need(a, e.line);
    const Json& y = need(b, e.line);
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      bool ok = false;
      const int c = compare_json(x, y, ok);
      if (!ok) fail(e.line, "cannot compare " + py_str(x, true) + " " + op + " " + py_str(y, true));
      return Value::of(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (op == "+") {
      if (x.is_string() && y.is_string()) {
        if (x.get_ref<const std::string&>().size() + y.get_ref<const std::string&>().size() > kMaxOutput)
          fail(e.line, "makes a string or list larger than 16 Mi");
        return Value::of(x.get<std::string>() + y.get<std::string>());
      }
      if (x.is_array() && y.is_array()) {
        if (x.size() + y.size() > kMaxOutput) fail(e.line, "makes a string or list larger than 16 Mi");
        Json out = x;
        for (const Json& v : y) out.push_back(v);
        return Value::of(std::move(out));
      }
    }
    if (op == "*" && x.is_string() && is_int(y)) {
      std::string out;
      if (!x.get_ref<const std::string&>().empty())
        for (std::int64_t i = 0; i < y.get<std::int64_t>() && out.size() <= kMaxOutput; ++i) out += x.get<std::string>();
      return sized(out, e.line);
    }
    if (x.is_number() && y.is_number() && !x.is_boolean() && !y.is_boolean()) {
      const bool ints = is_int(x) && is_int(y);
      if (ints && op != "/") {
        const std::int64_t p = x.get<std::int64_t>(), q = y.get<std::int64_t>();
        if ((op == "//" || op == "%") && q == 0) fail(e.line, "division by zero");
        std::int64_t r = 0;
        if ((op == "+" && __builtin_add_overflow(p, q, &r)) || (op == "-" && __builtin_sub_overflow(p, q, &r)) ||
            (op == "*" && __builtin_mul_overflow(p, q, &r)) || ((op == "//" || op == "%") && p == INT64_MIN && q == -1))
          fail(e.line, "integer overflow (Python's integers are unbounded, this renderer's 64-bit)");
        if (op == "+" || op == "-" || op == "*") return Value::of(r);
        const std::int64_t d = p / q - ((p % q != 0) && ((p < 0) != (q < 0)));  // Python's floor division
        if (op == "//") return Value::of(d);
        if (op == "%") return Value::of(p - d * q);
      }
      const double p = x.get<double>(), q = y.get<double>();
      if (op == "+") return Value::of(p + q);
      if (op == "-") return Value::of(p - q);
      if (op == "*") return Value::of(p * q);
      if (q == 0) fail(e.line, "division by zero");
      if (op == "/") return Value::of(p / q);
      if (op == "//") return Value::of(std::floor(p / q));
      if (op == "%") return Value::of(p - std::floor(p / q) * q);
    }
    fail(e.line, "unsupported operands for " + op + ": " + py_str(x, true) + " and " + py_str(y, true));
  }

  // Arguments after the first: positional then keyword, by name.
  struct Args {
    std::vector<Value> pos;
    std::map<std::string, Value> kw;
    const Value* get(std::size_t i, const std::string& name) const {
      if (i < pos.size()) return &pos[i];
      const auto it = kw.find(name);
      return it == kw.end() ? nullptr : &it->second;
    }
  };
  Args arguments(const Expr& e) {
    Args a;
    for (std::size_t i = 0; i < e.args.size(); ++i) {
      if (i < e.positional) a.pos.push_back(eval(*e.args[i]));
      else a.kw[e.keys[i - e.positional]] = eval(*e.args[i]);
    }
    return a;
  }

  std::u32string strip_set(const Args& a, int line) {
    const Value* c = a.get(0, "chars");
    if (c == nullptr || (c->kind == Value::Kind::json && c->j.is_null())) return {};
    return chars(need_string(*c, line, "strip's characters"));
  }
  static std::string strip(const std::string& s, const std::u32string& set, bool left, bool right) {
    const std::u32string u = chars(s);
    auto drop = [&](char32_t c) { return set.empty() ? py_space(c) : set.find(c) != std::u32string::npos; };
    std::size_t b = 0, e = u.size();
    if (left)
      while (b < e && drop(u[b])) ++b;
    if (right)
      while (e > b && drop(u[e - 1])) --e;
    return utf8(u.substr(b, e - b));
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.a);
    const Args a = arguments(e);
    const std::string& f = e.text;
    if (f == "default" || f == "d") {
      const Value* d = a.get(0, "default_value");
      const Value* boolean = a.get(1, "boolean");
      const bool use = v.undefined() || (boolean != nullptr && truth(*boolean) && !truth(v));
      return use ? (d ? *d : Value::of("")) : v;
    }
    if (f == "string") return Value::of(str(v, e.line));
    if ((f == "length" || f == "count") && v.undefined()) return Value::of(std::int64_t{0});
    const Json& j = need(v, e.line);
    if (f == "tojson") {
      const Value* indent = a.get(0, "indent");
      if (a.pos.size() + a.kw.size() > (indent ? 1u : 0u)) fail(e.line, "tojson's arguments other than indent are not implemented");
      const std::int64_t n = indent && !(indent->kind == Value::Kind::json && indent->j.is_null()) ? need_int(*indent, e.line, "tojson's indent") : -1;
      if (n > 64) fail(e.line, "tojson's indent is more than 64");
      return sized(py_json(j, static_cast<int>(n)), e.line);
    }
    if (f == "trim") {
      const Args none;
      return Value::of(strip(need_string(v, e.line, "trim"), a.pos.empty() && a.kw.empty() ? std::u32string() : strip_set(a, e.line), true, true));
    }
    if (f == "length" || f == "count") {
      if (j.is_string()) return Value::of(static_cast<std::int64_t>(chars(j.get<std::string>()).size()));
      if (j.is_array() || j.is_object()) return Value::of(static_cast<std::int64_t>(j.size()));
      fail(e.line, "length of " + py_str(j, true));
    }
    if (f == "lower" || f == "upper" || f == "capitalize" || f == "title") return string_method(f, need_string(v, e.line, f.c_str()), a, e.line);
    if (f == "replace") return string_method("replace", need_string(v, e.line, "replace"), a, e.line);
    if (f == "first" || f == "last") {
      if (j.is_array()) return j.empty() ? Value::missing(f) : Value::of(f == "first" ? j.front() : j.back());
      if (j.is_string()) {
        const std::u32string s = chars(j.get<std::string>());
        return s.empty() ? Value::missing(f) : Value::of(utf8(std::u32string(1, f == "first" ? s.front() : s.back())));
      }
      fail(e.line, f + " of " + py_str(j, true));
    }
    if (f == "join") {
      const Value* sep = a.get(0, "d");
      const std::string d = sep ? need_string(*sep, e.line, "join's separator") : "";
      if (!j.is_array()) fail(e.line, "join needs a list");
      std::string out;
      for (std::size_t i = 0; i < j.size() && out.size() <= kMaxOutput; ++i) out += (i ? d : "") + py_str(j[i], false);
      return sized(out, e.line);
    }
    if (f == "list") {
      if (j.is_array()) return v;
      Json out = Json::array();
      if (j.is_string())
        for (const char32_t c : chars(j.get<std::string>())) out.push_back(utf8(std::u32string(1, c)));
      else if (j.is_object())
        for (const auto& [k, x] : j.items()) out.push_back(k);
      else fail(e.line, "list of " + py_str(j, true));
      return Value::of(std::move(out));
    }
    if (f == "items") {
      if (!j.is_object()) fail(e.line, "items needs a dict");
      Json out = Json::array();
      for (const auto& [k, x] : j.items()) out.push_back(Json::array({k, x}));
      return Value::of(std::move(out));
    }
    if (f == "int") {
      if (is_int(j)) return v;
      if (j.is_number_float()) {
        const double d = j.get<double>();
        if (!(d > -9.2e18 && d < 9.2e18)) fail(e.line, "int of " + py_float(d) + " is out of this renderer's 64-bit range");
        return Value::of(static_cast<std::int64_t>(d));
      }
      if (j.is_boolean()) return Value::of(static_cast<std::int64_t>(j.get<bool>()));
      if (j.is_string()) {
        try {
          std::size_t used = 0;
          const long long x = std::stoll(j.get<std::string>(), &used);
          if (used == j.get<std::string>().size()) return Value::of(static_cast<std::int64_t>(x));
        } catch (const std::exception&) {
        }
      }
      return Value::of(std::int64_t{0});
    }
    if (f == "abs") {
      if (is_int(j) && j.get<std::int64_t>() == INT64_MIN) fail(e.line, "integer overflow (Python's integers are unbounded, this renderer's 64-bit)");
      if (is_int(j)) return Value::of(std::abs(j.get<std::int64_t>()));
      if (j.is_number()) return Value::of(std::fabs(j.get<double>()));
      fail(e.line, "abs of " + py_str(j, true));
    }
    fail(e.line, "the filter '" + f + "' is not implemented");
  }

  bool test(const Expr& e) {
    const Value v = eval(*e.a);
    const Args a = arguments(e);
    const std::string& t = e.text;
    if (t == "defined") return !v.undefined();
    if (t == "undefined") return v.undefined();
    if (v.undefined()) {
      if (t == "iterable" || t == "sequence") return true;  // Jinja's undefined iterates (as empty) and has a length (0)
      if (t == "none" || t == "string" || t == "number" || t == "integer" || t == "float" || t == "mapping" || t == "true" ||
          t == "false" || t == "boolean")
        return false;
      fail(e.line, "'" + v.name + "' is undefined");
    }
    if (v.kind == Value::Kind::ns) return t == "mapping" ? false : false;
    const Json& j = v.j;
    if (t == "none") return j.is_null();
    if (t == "string") return j.is_string();
    if (t == "number") return j.is_number() || j.is_boolean();
    if (t == "integer") return is_int(j);
    if (t == "float") return j.is_number_float();
    if (t == "boolean") return j.is_boolean();
    if (t == "true") return j.is_boolean() && j.get<bool>();
    if (t == "false") return j.is_boolean() && !j.get<bool>();
    if (t == "mapping") return j.is_object();
    if (t == "iterable" || t == "sequence") return j.is_string() || j.is_array() || j.is_object();
    if (t == "odd" || t == "even") {
      const std::int64_t x = need_int(v, e.line, "odd/even");
      return (x % 2 != 0) == (t == "odd");
    }
    const Value* other = a.get(0, "other");
    if (other == nullptr) fail(e.line, "the test '" + t + "' needs an argument");
    if (t == "eq" || t == "equalto") return equal(v, *other);
    if (t == "ne") return !equal(v, *other);
    if (t == "in") return contains(v, *other, e.line);
    bool ok = false;
    const int c = compare_json(j, need(*other, e.line), ok);
    if (!ok) fail(e.line, "cannot compare with the test '" + t + "'");
    return t == "lt" ? c < 0 : t == "gt" ? c > 0 : t == "le" ? c <= 0 : c >= 0;
  }

  Value string_method(const std::string& m, const std::string& s, const Args& a, int line) {
    auto arg = [&](std::size_t i, const char* name) -> const Value* { return a.get(i, name); };
    if (m == "startswith" || m == "endswith") {
      const Value* p = arg(0, "prefix");
      if (p == nullptr) fail(line, m + " needs an argument");
      const std::vector<std::string> options{need_string(*p, line, m.c_str())};  // (Python also takes a tuple: there are none here)
      for (const std::string& o : options)
        if (m == "startswith" ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                              : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0)
          return Value::of(true);
      return Value::of(false);
    }
    if (m == "strip" || m == "lstrip" || m == "rstrip") return Value::of(strip(s, strip_set(a, line), m != "rstrip", m != "lstrip"));
    if (m == "split") {
      const Value* sep = arg(0, "sep");
      const Value* most = arg(1, "maxsplit");
      const std::int64_t limit = most ? need_int(*most, line, "maxsplit") : -1;
      Json out = Json::array();
      if (sep == nullptr || (sep->kind == Value::Kind::json && sep->j.is_null())) {  // runs of whitespace
        const std::u32string u = chars(s);
        std::size_t i = 0;
        std::int64_t made = 0;
        while (i < u.size()) {
          while (i < u.size() && py_space(u[i])) ++i;
          if (i == u.size()) break;
          if (limit >= 0 && made == limit) {
            std::size_t e = u.size();
            while (e > i && py_space(u[e - 1])) --e;
            out.push_back(utf8(u.substr(i, e - i)));
            break;
          }
          std::size_t j = i;
          while (j < u.size() && !py_space(u[j])) ++j;
          out.push_back(utf8(u.substr(i, j - i)));
          ++made;
          i = j;
        }
        return Value::of(std::move(out));
      }
      const std::string d = need_string(*sep, line, "split's separator");
      if (d.empty()) fail(line, "split with an empty separator");
      std::size_t at = 0;
      std::int64_t made = 0;
      for (std::size_t hit; (limit < 0 || made < limit) && (hit = s.find(d, at)) != std::string::npos; at = hit + d.size(), ++made)
        out.push_back(s.substr(at, hit - at));
      out.push_back(s.substr(at));
      return Value::of(std::move(out));
    }
    if (m == "replace") {
      const Value* from = arg(0, "old");
      const Value* to = arg(1, "new");
      if (!from || !to) fail(line, "replace needs two arguments");
      const std::string f = need_string(*from, line, "replace"), t = need_string(*to, line, "replace");
      const Value* count = arg(2, "count");
      std::int64_t left = count ? need_int(*count, line, "replace's count") : -1;
      if (f.empty()) fail(line, "replace of an empty string is not implemented");
      std::string out;
      std::size_t at = 0;
      for (std::size_t hit; left != 0 && (hit = s.find(f, at)) != std::string::npos; at = hit + f.size(), --left) {
        out += s.substr(at, hit - at) + t;
        if (out.size() > kMaxOutput) fail(line, "makes a string or list larger than 16 Mi");
      }
      return Value::of(out + s.substr(at));
    }
    if (m == "lower" || m == "upper" || m == "capitalize" || m == "title") {
      std::string out = s;  // ASCII letters (Python's are Unicode: other scripts are refused below)
      for (const char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) fail(line, m + " of non-ASCII text is not implemented");
      bool start = true;
      for (char& c : out) {
        const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
        if (m == "lower") c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        else if (m == "upper") c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        else if (m == "title") c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        else c = static_cast<char>(&c == &out[0] ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        start = !alpha;
      }
      return Value::of(out);
    }
    fail(line, "the string method '" + m + "' is not implemented");
  }

  Value call(const Expr& e) {
    const Args a = arguments(e);
    if (e.a->kind == Expr::Kind::name) {
      const std::string& f = e.a->text;
      if (f == "namespace") {
        if (!a.pos.empty()) fail(e.line, "namespace() takes keyword arguments only here");
        Value ns;
        ns.kind = Value::Kind::ns;
        ns.ns = std::make_shared<std::map<std::string, Value>>(a.kw);
        return ns;
      }
      if (f == "raise_exception") {
        const Value* m = a.get(0, "message");
        fail(e.line, "raise_exception: " + (m ? str(*m, e.line) : std::string()));
      }
      if (f == "strftime_now") {  // transformers': datetime.now().strftime(format), local time
        const Value* fmt = a.get(0, "format");
        if (!fmt) fail(e.line, "strftime_now needs a format");
        const std::string format = need_string(*fmt, e.line, "strftime_now");
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char buf[512];
        const std::size_t n = format.empty() ? 0 : std::strftime(buf, sizeof buf, format.c_str(), &local);
        if (n == 0 && !format.empty()) fail(e.line, "strftime_now's format makes nothing or more than 511 bytes");
        return Value::of(std::string(buf, n));
      }
      if (f == "range") {
        std::int64_t from = 0, to = 0, step = 1;
        if (a.pos.size() == 1) to = need_int(a.pos[0], e.line, "range");
        else if (a.pos.size() == 2 || a.pos.size() == 3) {
          from = need_int(a.pos[0], e.line, "range");
          to = need_int(a.pos[1], e.line, "range");
          if (a.pos.size() == 3) step = need_int(a.pos[2], e.line, "range");
        } else fail(e.line, "range takes 1 to 3 integers");
        if (step == 0) fail(e.line, "range's step cannot be zero");
        Json out = Json::array();
        for (std::int64_t i = from; step > 0 ? i < to : i > to;) {
          out.push_back(i);
          if (out.size() > 100000) fail(e.line, "range of more than 100000 (the sandbox's limit)");
          if (__builtin_add_overflow(i, step, &i)) break;
        }
        return Value::of(std::move(out));
      }
      fail(e.line, "the function '" + f + "' is not implemented");
    }
    const Value self = eval(*e.a->a);
    const std::string& m = e.a->text;
    const Json& j = need(self, e.line);
    if (j.is_string()) return string_method(m, j.get<std::string>(), a, e.line);
    if (j.is_object()) {
      if (m == "get") {
        const Value* k = a.get(0, "key");
        if (!k) fail(e.line, "get needs a key");
        const Json& key = need(*k, e.line);
        if (key.is_string())
          if (const auto it = j.find(key.get<std::string>()); it != j.end()) return Value::of(*it);
        const Value* d = a.get(1, "default");
        return d ? *d : Value::of(nullptr);
      }
      Json out = Json::array();
      for (const auto& [k, x] : j.items()) {
        if (m == "items") out.push_back(Json::array({k, x}));
        else if (m == "keys") out.push_back(k);
        else if (m == "values") out.push_back(x);
        else fail(e.line, "the dict method '" + m + "' is not implemented");
      }
      Value v = Value::of(std::move(out));
      v.view = "dict_" + m;
      return v;
    }
    fail(e.line, "'" + m + "' is not a method of " + py_str(j, true));
  }

  std::string where_;
  std::vector<std::map<std::string, Value>> frames_;
  std::uint64_t steps_ = 0;
};

}  // namespace

std::string ChatTemplate::render(const Json& context) const {
  Renderer r(where_, context);
  std::string out;
  r.body(*body_, out);
  return out;
}

}  // namespace infer
