// infer — rendering a parsed chat template (chat_template.hpp) as Jinja 3 renders it in
// transformers' sandbox: statements, scopes and expressions here; values, their Python
// behaviour and the render's budget in chat_template_value.*; filters, tests and methods in
// chat_template_builtins.cpp.
//
// Nothing is copied to be read: names, attributes, items and loop variables are references
// into what owns them (chat_template_value.hpp), so a template's cost is what it makes, and
// that is charged before it is made.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "chat_template.hpp"
#include "chat_template_ast.hpp"
#include "chat_template_value.hpp"
#include "../common/unicode.hpp"

namespace infer {

namespace {

using namespace jinja;

class Renderer {
 public:
  Renderer(const std::string& where, const Json& context, const RenderLimits& limits) : b_(where, limits) {
    frames_.emplace_back();
    if (context.is_object())
      for (const auto& [k, v] : context.items()) bind(frames_[0], k, Value::ref(v));
  }

  enum class Flow { normal, break_, continue_ };

  Flow body(const Body& body, std::string& out) {
    for (const Node& n : body) {
      const Flow f = node(n, out);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  const RenderStats& stats() const { return b_.stats(); }

 private:
  void emit(std::string& out, const std::string& s, int line) {
    if (s.size() > b_.limits().output_bytes - std::min(b_.limits().output_bytes, out.size()))
      b_.fail(line, "renders more than " + std::to_string(b_.limits().output_bytes >> 20) + " MiB");
    out += s;
  }

  Flow node(const Node& n, std::string& out) {
    b_.step(n.line);
    switch (n.kind) {
      case Node::Kind::text: emit(out, n.text, n.line); return Flow::normal;
      case Node::Kind::output: emit(out, str(eval(*n.expr), b_, n.line), n.line); return Flow::normal;
      case Node::Kind::if_:
        for (const auto& [cond, branch] : n.branches)
          if (truth(eval(*cond))) return body(branch, out);
        return body(n.otherwise, out);
      case Node::Kind::set: {
        Value v = eval(*n.expr);
        if (n.attr.empty()) {
          bind(frames_.back(), n.text, std::move(v));
        } else {
          const Value target = lookup(n.text);
          if (target.kind != Value::Kind::ns) b_.fail(n.line, "'" + n.text + "' is not a namespace: cannot set ." + n.attr);
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
    body(n.otherwise, out);
    frames_.pop_back();
    return Flow::normal;
  }

  // What a for loop walks, one item at a time and without copying it: a list's items and a
  // dict's keys by index, a string's characters by byte offset.
  struct Walk {
    const Value& seq;
    Budget& b;
    int line;
    std::size_t end = 0;  // items (list, dict) or bytes (string)
    bool text = false;
    std::vector<const std::string*> keys;  // a dict's, in order (its iterators take no offsets)
    Value item(std::size_t& at) {
      const Json& j = seq.j();
      if (text) return Value::of(char_at(j.get_ref<const std::string&>(), at));
      if (j.is_array()) return Value::at(seq, j[at++]);
      b.made(kNodeBytes + keys[at]->size(), line);  // a dict's key, as a string value
      return Value::of(*keys[at++]);
    }
  };

  Flow loop(const Node& n, std::string& out) {
    const Value seq = eval(*n.expr);
    if (seq.undefined()) return otherwise(n, out);  // Jinja: an undefined value iterates as empty
    if (seq.kind == Value::Kind::ns) b_.fail(n.line, "a namespace is not iterable");
    if (seq.kind == Value::Kind::loop) b_.fail(n.line, "a loop is not iterable (read its attributes: loop.index, ...)");
    const Json& j = seq.j();
    Walk walk{seq, b_, n.line, 0, false, {}};
    if (j.is_array()) {
      walk.end = j.size();
    } else if (j.is_object()) {
      walk.end = j.size();
      b_.made(sizeof(void*) * j.size(), n.line);
      for (const auto& [k, v] : j.items()) walk.keys.push_back(&k);
    } else if (j.is_string()) {
      walk.end = j.get_ref<const std::string&>().size();
      walk.text = true;
    } else {
      b_.fail(n.line, "cannot iterate over " + brief(j));
    }
    auto targets = [&](Frame& f, const Value& item) {
      if (n.targets.size() == 1) {
        bind(f, n.targets[0], item);
        return;
      }
      const Json& x = need(item, b_, n.line);
      if (!x.is_array() || x.size() != n.targets.size()) b_.fail(n.line, "cannot unpack " + brief(x) + " into two names");
      for (std::size_t k = 0; k < n.targets.size(); ++k) bind(f, n.targets[k], Value::at(item, x[k]));
    };
    // The positions walked: every one, or (with the loop's own "if") those kept, found first
    // because loop.length and loop.last count only them.
    std::vector<std::size_t> kept;
    std::size_t count = 0;
    if (n.filter) {
      for (std::size_t at = 0; at < walk.end;) {
        b_.step(n.line);
        const std::size_t here = at;
        frames_.emplace_back();
        targets(frames_.back(), walk.item(at));
        const bool keep = truth(eval(*n.filter));
        frames_.pop_back();
        if (keep) {
          b_.made(sizeof(std::size_t), n.line);
          kept.push_back(here);
        }
      }
      count = kept.size();
    } else {
      b_.work(walk.end, n.line);
      count = walk.text ? count_chars(j.get_ref<const std::string&>()) : walk.end;
    }
    if (count == 0) return otherwise(n, out);
    const auto len = static_cast<std::int64_t>(count);
    std::size_t at = 0;
    frames_.emplace_back();  // one scope, emptied for each item (what the body sets is the item's)
    Flow f = Flow::normal;
    for (std::int64_t i = 0; i < len && f != Flow::break_; ++i) {
      b_.step(n.line);  // (an empty body takes steps too)
      if (n.filter) at = kept[static_cast<std::size_t>(i)];
      frames_.back().clear();
      targets(frames_.back(), walk.item(at));
      bind(frames_.back(), "loop", Value::loop(i, len));
      f = body(n.branches[0].second, out);
    }
    frames_.pop_back();
    return Flow::normal;
  }

  // A scope's names: a few each (a loop's targets and `loop`, a body's sets; the context's
  // keys), so a list searched from its end is faster than a map.
  using Frame = std::vector<std::pair<std::string, Value>>;
  static void bind(Frame& f, const std::string& name, Value v) {
    for (auto& [k, x] : f)
      if (k == name) {
        x = std::move(v);
        return;
      }
    f.emplace_back(name, std::move(v));
  }
  Value lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f)
      for (auto it = f->rbegin(); it != f->rend(); ++it)
        if (it->first == name) return it->second;
    return Value::missing(name);
  }
  // loop.index and the rest, as Jinja's LoopContext has them.
  Value loop_attribute(const Value& l, const std::string& name) const {
    const std::int64_t i = l.index0, n = l.length;
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i + 1 == n);
    if (name == "length") return Value::integer(n);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    return Value::missing(name);
  }

  // Python's index of `i` into a sequence of `n`: nullopt when out of range.
  static std::optional<std::size_t> index(std::int64_t i, std::size_t n) {
    if (i < 0) i += static_cast<std::int64_t>(n);
    if (i < 0 || i >= static_cast<std::int64_t>(n)) return std::nullopt;
    return static_cast<std::size_t>(i);
  }

  // A copy of `v` to be held by a list or dict the template makes: charged first.
  Json copy(const Value& v, int line) {
    const Json& j = need(v, b_, line);
    b_.made(footprint(j, b_, line), line);
    return j;
  }

  Value eval(const Expr& e) {
    b_.step(e.line);
    switch (e.kind) {
      case Expr::Kind::literal: return Value::ref(e.value);  // (the template outlives the render)
      case Expr::Kind::name: return lookup(e.text);
      case Expr::Kind::list: {
        Json a = Json::array();
        for (const ExprPtr& x : e.args) a.push_back(copy(eval(*x), e.line));
        return Value::of(std::move(a));
      }
      case Expr::Kind::dict: {
        Json o = Json::object();
        for (std::size_t i = 0; i < e.keys.size(); ++i) o[e.keys[i]] = copy(eval(*e.args[i]), e.line);
        return Value::of(std::move(o));
      }
      case Expr::Kind::attribute: {
        const Value a = eval(*e.a);
        if (a.undefined()) b_.fail(e.line, "'" + a.name + "' is undefined");
        if (a.kind == Value::Kind::ns) {
          if (const auto it = a.ns->find(e.text); it != a.ns->end()) return it->second;
          return Value::missing(e.text);
        }
        if (a.kind == Value::Kind::loop) return loop_attribute(a, e.text);
        if (a.j().is_object()) {
          b_.work(kNodeBytes * a.j().size(), e.line);  // (an ordered dict looks its keys up one by one)
          if (const auto it = a.j().find(e.text); it != a.j().end()) return Value::at(a, *it);
        }
        return Value::missing(e.text);
      }
      case Expr::Kind::item: return item(e);
      case Expr::Kind::slice: return slice(e);
      case Expr::Kind::conditional:
        if (truth(eval(*e.a))) return eval(*e.b);
        return e.c ? eval(*e.c) : Value::missing("(else)");
      case Expr::Kind::unary: {
        const Value a = eval(*e.a);
        if (e.text == "not") return Value::boolean(!truth(a));
        const Json& j = need(a, b_, e.line);
        if (!j.is_number() || j.is_boolean()) b_.fail(e.line, "unary " + e.text + " needs a number");
        if (e.text == "+") return a;
        if (is_int(j) && j.get<std::int64_t>() == INT64_MIN)
          b_.fail(e.line, "integer overflow (Python's integers are unbounded, this renderer's 64-bit)");
        return is_int(j) ? Value::of(-j.get<std::int64_t>()) : Value::of(-j.get<double>());
      }
      case Expr::Kind::binary: return binary(e);
      case Expr::Kind::filter: {
        const Value v = eval(*e.a);
        return filter(e.text, v, arguments(e), b_, e.line);
      }
      case Expr::Kind::test: {
        const Value v = eval(*e.a);
        return Value::boolean(test(e.text, v, arguments(e), b_, e.line) != e.negated);
      }
      case Expr::Kind::call: return call(e);
    }
    b_.fail(e.line, "an expression this renderer does not know");
  }

  Value item(const Expr& e) {
    const Value a = eval(*e.a);
    const Value k = eval(*e.b);
    if (a.undefined()) b_.fail(e.line, "'" + a.name + "' is undefined");
    if (a.kind == Value::Kind::ns) b_.fail(e.line, "a namespace has no items");
    const Json& key = need(k, b_, e.line);
    if (a.kind == Value::Kind::loop)  // (Jinja's LoopContext: an item is its attribute, or undefined)
      return key.is_string() ? loop_attribute(a, key.get_ref<const std::string&>()) : Value::missing(brief(key));
    const Json& j = a.j();
    if (j.is_object() && key.is_string()) {
      b_.work(kNodeBytes * j.size(), e.line);
      if (const auto it = j.find(key.get_ref<const std::string&>()); it != j.end()) return Value::at(a, *it);
      return Value::missing(key.get<std::string>());
    }
    if ((j.is_array() || j.is_string()) && (is_int(key) || key.is_boolean())) {
      const std::int64_t i = need_int(k, b_, e.line, "an index");
      if (j.is_array()) {
        const auto at = index(i, j.size());
        return at ? Value::at(a, j[*at]) : Value::missing(std::to_string(i));
      }
      const std::string& s = j.get_ref<const std::string&>();  // the i-th code point: walked to, not decoded whole
      b_.work(s.size(), e.line);
      const auto at = index(i, i < 0 ? count_chars(s) : s.size());
      if (!at) return Value::missing(std::to_string(i));
      std::size_t byte = 0;
      for (std::size_t c = 0; c < *at && byte < s.size(); ++c) (void)unicode::next_utf8(s, byte);
      if (byte >= s.size()) return Value::missing(std::to_string(i));
      return Value::of(char_at(s, byte));
    }
    return Value::missing(key.is_string() ? key.get<std::string>() : brief(key));
  }

  Value slice(const Expr& e) {
    const Value a = eval(*e.a);
    const Json& j = need(a, b_, e.line);
    std::optional<std::int64_t> p[3];
    for (int k = 0; k < 3; ++k)
      if (e.args[static_cast<std::size_t>(k)]) {
        const Value v = eval(*e.args[static_cast<std::size_t>(k)]);
        if (!v.is_null()) p[k] = need_int(v, b_, e.line, "a slice");
      }
    const std::int64_t step = p[2].value_or(1);
    if (step == 0) b_.fail(e.line, "a slice step cannot be zero");
    // Python's slice indices, visited in order: f(i) for each.
    auto walk = [&](std::int64_t n, auto&& f) {
      auto clamp = [&](std::optional<std::int64_t> x, std::int64_t def) {
        if (!x) return def;
        const std::int64_t v = *x < 0 ? *x + n : *x;
        if (step > 0) return std::clamp<std::int64_t>(v, 0, n);
        return std::clamp<std::int64_t>(v, -1, n - 1);
      };
      const std::int64_t start = clamp(p[0], step > 0 ? 0 : n - 1), stop = clamp(p[1], step > 0 ? n : -1);
      for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
        f(static_cast<std::size_t>(i));
        if (__builtin_add_overflow(i, step, &i)) break;
      }
    };
    if (j.is_array()) {
      Json out = Json::array();
      walk(static_cast<std::int64_t>(j.size()), [&](std::size_t i) {
        b_.made(footprint(j[i], b_, e.line), e.line);
        out.push_back(j[i]);
      });
      return Value::of(std::move(out));
    }
    if (j.is_string()) {
      const std::u32string s = decode(j.get_ref<const std::string&>(), b_, e.line);
      std::u32string out;
      walk(static_cast<std::int64_t>(s.size()), [&](std::size_t i) { out += s[i]; });
      return Value::of(encode(out, b_, e.line));
    }
    b_.fail(e.line, "cannot slice " + brief(j));
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
    if (op == "==") return Value::boolean(equal(a, b, b_, e.line));
    if (op == "!=") return Value::boolean(!equal(a, b, b_, e.line));
    if (op == "in") return Value::boolean(contains(a, b, b_, e.line));
    if (op == "notin") return Value::boolean(!contains(a, b, b_, e.line));
    if (op == "~") {
      std::string s = str(a, b_, e.line);
      const std::string t = str(b, b_, e.line);
      b_.size(s.size() + t.size(), e.line);
      b_.made(s.size() + t.size(), e.line);
      return Value::of(s += t);
    }
    const Json& x = need(a, b_, e.line);
    const Json& y = need(b, b_, e.line);
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      bool ok = false;
      if (x.is_string() && y.is_string())
        b_.work(std::min(x.get_ref<const std::string&>().size(), y.get_ref<const std::string&>().size()), e.line);
      const int c = compare(x, y, ok);
      if (!ok) b_.fail(e.line, "cannot compare " + brief(x) + " " + op + " " + brief(y));
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (op == "+") {
      if (x.is_string() && y.is_string()) {
        const std::string &s = x.get_ref<const std::string&>(), &t = y.get_ref<const std::string&>();
        b_.size(s.size() + t.size(), e.line);
        b_.made(s.size() + t.size(), e.line);
        return Value::of(s + t);
      }
      if (x.is_array() && y.is_array()) {
        b_.size(x.size() + y.size(), e.line);
        b_.made(footprint(x, b_, e.line) + footprint(y, b_, e.line), e.line);
        Json out = x;
        for (const Json& v : y) out.push_back(v);
        return Value::of(std::move(out));
      }
    }
    if (op == "*" && x.is_string() && is_int(y)) {
      const std::string& s = x.get_ref<const std::string&>();
      const std::int64_t times = std::max<std::int64_t>(0, y.get<std::int64_t>());
      if (s.empty() || times == 0) return Value::of("");
      if (static_cast<std::uint64_t>(times) > b_.limits().value_size / s.size()) b_.size(b_.limits().value_size + 1, e.line);
      b_.made(s.size() * static_cast<std::uint64_t>(times), e.line);
      std::string out;
      out.reserve(s.size() * static_cast<std::size_t>(times));
      for (std::int64_t i = 0; i < times; ++i) out += s;
      return Value::of(std::move(out));
    }
    if (x.is_number() && y.is_number() && !x.is_boolean() && !y.is_boolean()) {
      const bool ints = is_int(x) && is_int(y);
      if (ints && op != "/") {
        const std::int64_t p = x.get<std::int64_t>(), q = y.get<std::int64_t>();
        if ((op == "//" || op == "%") && q == 0) b_.fail(e.line, "division by zero");
        std::int64_t r = 0;
        if ((op == "+" && __builtin_add_overflow(p, q, &r)) || (op == "-" && __builtin_sub_overflow(p, q, &r)) ||
            (op == "*" && __builtin_mul_overflow(p, q, &r)) || ((op == "//" || op == "%") && p == INT64_MIN && q == -1))
          b_.fail(e.line, "integer overflow (Python's integers are unbounded, this renderer's 64-bit)");
        if (op == "+" || op == "-" || op == "*") return Value::integer(r);
        const std::int64_t d = p / q - ((p % q != 0) && ((p < 0) != (q < 0)));  // Python's floor division
        if (op == "//") return Value::integer(d);
        if (op == "%") return Value::integer(p - d * q);
      }
      const double p = x.get<double>(), q = y.get<double>();
      if (op == "+") return Value::of(p + q);
      if (op == "-") return Value::of(p - q);
      if (op == "*") return Value::of(p * q);
      if (q == 0) b_.fail(e.line, "division by zero");
      if (op == "/") return Value::of(p / q);
      if (op == "//") return Value::of(std::floor(p / q));
      if (op == "%") return Value::of(p - std::floor(p / q) * q);
    }
    b_.fail(e.line, "unsupported operands for " + op + ": " + brief(x) + " and " + brief(y));
  }

  Args arguments(const Expr& e) {
    Args a;
    for (std::size_t i = 0; i < e.args.size(); ++i) {
      if (i < e.positional) a.pos.push_back(eval(*e.args[i]));
      else a.kw[e.keys[i - e.positional]] = eval(*e.args[i]);
    }
    return a;
  }

  Value call(const Expr& e) {
    const Args a = arguments(e);
    if (e.a->kind == Expr::Kind::name) return call_function(e.a->text, a, b_, e.line);
    const Value self = eval(*e.a->a);
    return call_method(e.a->text, self, a, b_, e.line);
  }

  Budget b_;
  std::vector<Frame> frames_;
};

}  // namespace

std::string ChatTemplate::render(const Json& context, const RenderLimits& limits, RenderStats* stats) const {
  Renderer r(where_, context, limits);
  std::string out;
  try {
    r.body(*body_, out);
  } catch (...) {
    if (stats) *stats = r.stats();
    throw;
  }
  if (stats) *stats = r.stats();
  return out;
}

}  // namespace infer
