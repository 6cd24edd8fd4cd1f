// infer — a chat template's filters, tests, functions and methods (chat_template_value.hpp),
// as Jinja 3 in transformers' sandbox has them. Each charges the render's budget for what it
// makes or reads before making it (a split of 16 MB, a list of its characters: refused before
// the memory is taken).
#include <algorithm>
#include <cmath>
#include <ctime>

#include "chat_template_value.hpp"
#include "../common/unicode.hpp"

namespace infer::jinja {

namespace {

// strip's characters, sorted (a lookup per character of the text is then a binary search,
// not a walk of the set: a 4 MB set against a 4 MB text).
std::u32string strip_set(const Args& a, Budget& b, int line) {
  const Value* c = a.get(0, "chars");
  if (c == nullptr || c->is_null()) return {};
  std::u32string set = decode(need_string(*c, b, line, "strip's characters"), b, line);
  std::sort(set.begin(), set.end());
  return set;
}

std::string strip(const std::string& s, const std::u32string& set, bool left, bool right, Budget& b, int line) {
  const std::u32string u = decode(s, b, line);
  auto drop = [&](char32_t c) { return set.empty() ? py_space(c) : std::binary_search(set.begin(), set.end(), c); };
  std::size_t from = 0, to = u.size();
  if (left)
    while (from < to && drop(u[from])) ++from;
  if (right)
    while (to > from && drop(u[to - 1])) --to;
  return encode(u.substr(from, to - from), b, line);
}

// A string made from pieces: each piece charged as it is added, so that a split or replace
// that would make too much is refused part way, not after.
struct Pieces {
  Budget& b;
  int line;
  Json out = Json::array();
  void add(std::string s) {
    b.made(kNodeBytes + s.size(), line);
    b.size(out.size() + 1, line);
    out.push_back(std::move(s));
  }
};

// One branch per Python string method templates call, as filter() is (87 lines: the list).
Value string_method(const std::string& m, const Value& self, const Args& a, Budget& b, int line) {
  const std::string& s = need_string(self, b, line, m.c_str());
  if (m == "startswith" || m == "endswith") {
    const Value* p = a.get(0, "prefix");
    if (p == nullptr) b.fail(line, m + " needs an argument");
    const std::string& o = need_string(*p, b, line, m.c_str());  // (Python also takes a tuple: there are none here)
    b.work(o.size(), line);
    if (s.size() < o.size()) return Value::boolean(false);
    return Value::boolean(m == "startswith" ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0);
  }
  if (m == "strip" || m == "lstrip" || m == "rstrip")
    return Value::of(strip(s, strip_set(a, b, line), m != "rstrip", m != "lstrip", b, line));
  if (m == "split") {
    const Value* sep = a.get(0, "sep");
    const Value* most = a.get(1, "maxsplit");
    const std::int64_t limit = most ? need_int(*most, b, line, "maxsplit") : -1;
    Pieces out{b, line};
    b.work(s.size(), line);
    if (sep == nullptr || sep->is_null()) {  // runs of whitespace
      const std::u32string u = decode(s, b, line);
      std::size_t i = 0;
      std::int64_t made = 0;
      while (i < u.size()) {
        while (i < u.size() && py_space(u[i])) ++i;
        if (i == u.size()) break;
        if (limit >= 0 && made == limit) {
          std::size_t e = u.size();
          while (e > i && py_space(u[e - 1])) --e;
          out.add(unicode::encode_utf8(u.substr(i, e - i)));
          break;
        }
        std::size_t j = i;
        while (j < u.size() && !py_space(u[j])) ++j;
        out.add(unicode::encode_utf8(u.substr(i, j - i)));
        ++made;
        i = j;
      }
      return Value::of(std::move(out.out));
    }
    const std::string& d = need_string(*sep, b, line, "split's separator");
    if (d.empty()) b.fail(line, "split with an empty separator");
    std::size_t at = 0;
    std::int64_t made = 0;
    for (std::size_t hit; (limit < 0 || made < limit) && (hit = find_text(s, d, at)) != std::string::npos; at = hit + d.size(), ++made)
      out.add(s.substr(at, hit - at));
    out.add(s.substr(at));
    return Value::of(std::move(out.out));
  }
  if (m == "replace") {
    const Value* from = a.get(0, "old");
    const Value* to = a.get(1, "new");
    if (!from || !to) b.fail(line, "replace needs two arguments");
    const std::string &f = need_string(*from, b, line, "replace"), &t = need_string(*to, b, line, "replace");
    const Value* count = a.get(2, "count");
    std::int64_t left = count ? need_int(*count, b, line, "replace's count") : -1;
    if (f.empty()) b.fail(line, "replace of an empty string is not implemented");
    b.work(s.size(), line);
    std::string out;
    std::size_t at = 0;
    for (std::size_t hit; left != 0 && (hit = find_text(s, f, at)) != std::string::npos; at = hit + f.size(), --left) {
      b.made(hit - at + t.size(), line);
      b.size(out.size() + (hit - at) + t.size(), line);
      out.append(s, at, hit - at).append(t);
    }
    b.made(s.size() - at, line);
    b.size(out.size() + (s.size() - at), line);
    return Value::of(out.append(s, at));
  }
  if (m == "lower" || m == "upper" || m == "capitalize" || m == "title") {
    b.made(s.size(), line);
    std::string out = s;  // ASCII letters (Python's are Unicode: other scripts are refused below)
    for (const char c : s)
      if (static_cast<unsigned char>(c) >= 0x80) b.fail(line, m + " of non-ASCII text is not implemented");
    bool start = true;
    for (char& c : out) {
      const auto u = static_cast<unsigned char>(c);
      const bool alpha = std::isalpha(u) != 0;
      if (m == "lower") c = static_cast<char>(std::tolower(u));
      else if (m == "upper") c = static_cast<char>(std::toupper(u));
      else if (m == "title") c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      else c = static_cast<char>(&c == &out[0] ? std::toupper(u) : std::tolower(u));
      start = !alpha;
    }
    return Value::of(std::move(out));
  }
  b.fail(line, "the string method '" + m + "' is not implemented");
}

}  // namespace

// One branch per Jinja filter, a few lines each, in one function on purpose (108 lines):
// the chain reads as the list of filters the renderer implements, and one that is not is
// refused at its end, naming it.
Value filter(const std::string& f, const Value& v, const Args& a, Budget& b, int line) {
  if (f == "default" || f == "d") {
    const Value* d = a.get(0, "default_value");
    const Value* boolean = a.get(1, "boolean");
    const bool use = v.undefined() || (boolean != nullptr && truth(*boolean) && !truth(v));
    return use ? (d ? *d : Value::of("")) : v;
  }
  if (f == "string") return Value::of(str(v, b, line));
  if ((f == "length" || f == "count") && v.undefined()) return Value::integer(0);
  if ((f == "length" || f == "count") && v.kind == Value::Kind::loop) return Value::integer(v.length);  // (LoopContext's len())
  const Json& j = need(v, b, line);
  if (f == "tojson") {
    const Value* indent = a.get(0, "indent");
    if (a.pos.size() + a.kw.size() > (indent ? 1u : 0u)) b.fail(line, "tojson's arguments other than indent are not implemented");
    const std::int64_t n = indent && !indent->is_null() ? need_int(*indent, b, line, "tojson's indent") : -1;
    if (n > 64) b.fail(line, "tojson's indent is more than 64");
    return Value::of(to_json(j, static_cast<int>(n), b, line));
  }
  if (f == "trim")
    return Value::of(strip(need_string(v, b, line, "trim"), a.empty() ? std::u32string() : strip_set(a, b, line), true, true, b, line));
  if (f == "length" || f == "count") {
    if (j.is_string()) {
      b.work(j.get_ref<const std::string&>().size(), line);
      return Value::integer(static_cast<std::int64_t>(count_chars(j.get_ref<const std::string&>())));
    }
    if (j.is_array() || j.is_object()) return Value::integer(static_cast<std::int64_t>(j.size()));
    b.fail(line, "length of " + brief(j));
  }
  if (f == "lower" || f == "upper" || f == "capitalize" || f == "title" || f == "replace") return string_method(f, v, a, b, line);
  if (f == "first" || f == "last") {
    if (j.is_array()) return j.empty() ? Value::missing(f) : Value::at(v, f == "first" ? j.front() : j.back());
    if (j.is_string()) {
      const std::string& s = j.get_ref<const std::string&>();
      if (s.empty()) return Value::missing(f);
      std::size_t at = 0;
      if (f == "last") {  // the last code point: at most 4 bytes back, decoded forward as Python would
        b.work(s.size(), line);
        std::size_t from = 0;
        for (std::size_t i = 0; i < s.size();) {
          from = i;
          (void)unicode::next_utf8(s, i);
        }
        at = from;
      }
      return Value::of(char_at(s, at));
    }
    b.fail(line, f + " of " + brief(j));
  }
  if (f == "join") {
    const Value* sep = a.get(0, "d");
    const std::string d = sep ? need_string(*sep, b, line, "join's separator") : "";
    if (!j.is_array()) b.fail(line, "join needs a list");
    std::string out;
    for (std::size_t i = 0; i < j.size(); ++i) {
      const std::string piece = (i ? d : "") + (j[i].is_string() ? j[i].get<std::string>() : str(Value::at(v, j[i]), b, line));
      b.made(piece.size(), line);
      b.size(out.size() + piece.size(), line);
      out += piece;
    }
    return Value::of(std::move(out));
  }
  if (f == "list") {
    if (j.is_array()) return v;
    Pieces out{b, line};
    if (j.is_string()) {
      const std::string& s = j.get_ref<const std::string&>();
      b.made(kNodeBytes * count_chars(s), line);  // refused before the list is made
      for (std::size_t at = 0; at < s.size();) out.add(char_at(s, at));
    } else if (j.is_object()) {
      for (const auto& [k, x] : j.items()) out.add(k);
    } else {
      b.fail(line, "list of " + brief(j));
    }
    return Value::of(std::move(out.out));
  }
  if (f == "items") {
    if (!j.is_object()) b.fail(line, "items needs a dict");
    b.made(footprint(j, b, line), line);
    Json out = Json::array();
    for (const auto& [k, x] : j.items()) out.push_back(Json::array({k, x}));
    return Value::of(std::move(out));
  }
  if (f == "int") {
    if (is_int(j)) return v;
    if (j.is_number_float()) {
      const double d = j.get<double>();
      if (!(d > -9.2e18 && d < 9.2e18)) b.fail(line, "int of " + py_float(d) + " is out of this renderer's 64-bit range");
      return Value::of(static_cast<std::int64_t>(d));
    }
    if (j.is_boolean()) return Value::of(static_cast<std::int64_t>(j.get<bool>()));
    if (j.is_string() && j.get_ref<const std::string&>().size() <= 64) {
      try {
        std::size_t used = 0;
        const long long x = std::stoll(j.get<std::string>(), &used);
        if (used == j.get_ref<const std::string&>().size()) return Value::of(static_cast<std::int64_t>(x));
      } catch (const std::exception&) {
      }
    }
    return Value::integer(0);
  }
  if (f == "abs") {
    if (is_int(j) && j.get<std::int64_t>() == INT64_MIN) b.fail(line, "integer overflow (Python's integers are unbounded, this renderer's 64-bit)");
    if (is_int(j)) return Value::of(std::abs(j.get<std::int64_t>()));
    if (j.is_number()) return Value::of(std::fabs(j.get<double>()));
    b.fail(line, "abs of " + brief(j));
  }
  b.fail(line, "the filter '" + f + "' is not implemented");
}

bool test(const std::string& t, const Value& v, const Args& a, Budget& b, int line) {
  if (t == "defined") return !v.undefined();
  if (t == "undefined") return v.undefined();
  if (v.undefined()) {
    if (t == "iterable" || t == "sequence") return true;  // Jinja's undefined iterates (as empty) and has a length (0)
    if (t == "none" || t == "string" || t == "number" || t == "integer" || t == "float" || t == "mapping" || t == "true" ||
        t == "false" || t == "boolean")
      return false;
    b.fail(line, "'" + v.name + "' is undefined");
  }
  if (v.kind == Value::Kind::ns || v.kind == Value::Kind::loop) return false;
  const Json& j = v.j();
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
    const std::int64_t x = need_int(v, b, line, "odd/even");
    return (x % 2 != 0) == (t == "odd");
  }
  const Value* other = a.get(0, "other");
  if (other == nullptr) b.fail(line, "the test '" + t + "' needs an argument");
  if (t == "eq" || t == "equalto") return equal(v, *other, b, line);
  if (t == "ne") return !equal(v, *other, b, line);
  if (t == "in") return contains(v, *other, b, line);
  bool ok = false;
  const Json& o = need(*other, b, line);
  if (j.is_string() && o.is_string()) b.work(std::min(j.get_ref<const std::string&>().size(), o.get_ref<const std::string&>().size()), line);
  const int c = compare(j, o, ok);
  if (!ok) b.fail(line, "cannot compare with the test '" + t + "'");
  return t == "lt" ? c < 0 : t == "gt" ? c > 0 : t == "le" ? c <= 0 : c >= 0;
}

Value call_function(const std::string& f, const Args& a, Budget& b, int line) {
  if (f == "namespace") {
    if (!a.pos.empty()) b.fail(line, "namespace() takes keyword arguments only here");
    Value ns;
    ns.kind = Value::Kind::ns;
    ns.ns = std::make_shared<std::map<std::string, Value>>(a.kw);
    return ns;
  }
  if (f == "raise_exception") {
    const Value* m = a.get(0, "message");
    b.fail(line, "raise_exception: " + (m ? str(*m, b, line) : std::string()));
  }
  if (f == "strftime_now") {  // transformers': datetime.now().strftime(format), local time
    const Value* fmt = a.get(0, "format");
    if (!fmt) b.fail(line, "strftime_now needs a format");
    const std::string& format = need_string(*fmt, b, line, "strftime_now");
    if (format.size() > 256) b.fail(line, "strftime_now's format is longer than 256 bytes");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[512];
    const std::size_t n = format.empty() ? 0 : std::strftime(buf, sizeof buf, format.c_str(), &local);
    if (n == 0 && !format.empty()) b.fail(line, "strftime_now's format makes nothing or more than 511 bytes");
    return Value::of(std::string(buf, n));
  }
  if (f == "range") {
    std::int64_t from = 0, to = 0, step = 1;
    if (a.pos.size() == 1) {
      to = need_int(a.pos[0], b, line, "range");
    } else if (a.pos.size() == 2 || a.pos.size() == 3) {
      from = need_int(a.pos[0], b, line, "range");
      to = need_int(a.pos[1], b, line, "range");
      if (a.pos.size() == 3) step = need_int(a.pos[2], b, line, "range");
    } else {
      b.fail(line, "range takes 1 to 3 integers");
    }
    if (step == 0) b.fail(line, "range's step cannot be zero");
    Json out = Json::array();
    for (std::int64_t i = from; step > 0 ? i < to : i > to;) {
      out.push_back(i);
      if (out.size() > 100000) b.fail(line, "range of more than 100000 (the sandbox's limit)");
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    b.made(kNodeBytes * out.size(), line);
    return Value::of(std::move(out));
  }
  b.fail(line, "the function '" + f + "' is not implemented");
}

Value call_method(const std::string& m, const Value& self, const Args& a, Budget& b, int line) {
  const Json& j = need(self, b, line);
  if (j.is_string()) return string_method(m, self, a, b, line);
  if (j.is_object()) {
    if (m == "get") {
      const Value* k = a.get(0, "key");
      if (!k) b.fail(line, "get needs a key");
      const Json& key = need(*k, b, line);
      b.work(kNodeBytes * j.size(), line);
      if (key.is_string())
        if (const auto it = j.find(key.get_ref<const std::string&>()); it != j.end()) return Value::at(self, *it);
      const Value* d = a.get(1, "default");
      return d ? *d : Value::of(nullptr);
    }
    if (m != "items" && m != "keys" && m != "values") b.fail(line, "the dict method '" + m + "' is not implemented");
    b.made(footprint(j, b, line), line);
    Json out = Json::array();
    for (const auto& [k, x] : j.items()) {
      if (m == "items") out.push_back(Json::array({k, x}));
      else if (m == "keys") out.push_back(k);
      else out.push_back(x);
    }
    Value v = Value::of(std::move(out));
    v.view = "dict_" + m;
    return v;
  }
  b.fail(line, "'" + m + "' is not a method of " + brief(j));
}

}  // namespace infer::jinja
