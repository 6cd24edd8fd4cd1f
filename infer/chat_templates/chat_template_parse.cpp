// infer — parsing a chat template (chat_template.hpp) into its syntax tree
// (chat_template_ast.hpp): the template cut into text and tags with Jinja's whitespace rules,
// then each tag's expression by recursive descent in Jinja's precedence.
#include "chat_template.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <cctype>
#include <set>

#include "chat_template_ast.hpp"

namespace infer {

namespace {

using namespace jinja;

constexpr std::size_t kMaxSource = 256 * 1024;
constexpr int kMaxDepth = 64;
constexpr int kMaxOps = 1024;

struct Fail {
  std::string where;
  [[noreturn]] void operator()(int line, const std::string& what) const {
    throw ringattn::FileError("chat template " + where + ": line " + std::to_string(line) + ": " + what);
  }
};

// ---- the template as text and tags

struct Segment {
  enum class Kind { text, output, statement } kind;
  std::string text;  // text, or the tag's inside
  int line = 0;
};

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\n'; }

std::vector<Segment> segments(const std::string& s, const Fail& fail) {
  std::vector<Segment> out;
  std::size_t pos = 0;
  int line = 1;
  bool line_starting = true;  // the text to come starts a line (lstrip_blocks)
  bool strip_next = false;    // the previous tag ended with "-": drop the text's leading whitespace
  auto count_lines = [&](std::size_t from, std::size_t to) { line += static_cast<int>(std::count(s.begin() + static_cast<std::ptrdiff_t>(from), s.begin() + static_cast<std::ptrdiff_t>(to), '\n')); };
  while (pos <= s.size()) {
    std::size_t open = s.find('{', pos);
    while (open != std::string::npos && open + 1 < s.size() && s[open + 1] != '{' && s[open + 1] != '%' && s[open + 1] != '#')
      open = s.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= s.size()) open = std::string::npos;
    std::string text = s.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (strip_next) {
      std::size_t k = 0;
      while (k < text.size() && blank(text[k])) ++k;
      text.erase(0, k);
    }
    const int text_line = line;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Kind::text, text, text_line});
      break;
    }
    count_lines(pos, open);
    const char kind = s[open + 1];  // '{' output, '%' statement, '#' comment
    std::size_t inner = open + 2;
    const char mod = inner < s.size() ? s[inner] : '\0';
    if (mod == '-') {
      while (!text.empty() && blank(text.back())) text.pop_back();
      ++inner;
    } else if (mod == '+') {
      ++inner;
    } else if (kind != '{') {  // lstrip_blocks: spaces and tabs between a line's start and a block or comment
      const std::size_t l = text.rfind('\n');
      const std::size_t from = l == std::string::npos ? 0 : l + 1;
      if ((l != std::string::npos || line_starting) && from < text.size() &&
          std::all_of(text.begin() + static_cast<std::ptrdiff_t>(from), text.end(), [](char c) { return blank(c) && c != '\n'; }))
        text.erase(from);
    }
    if (!text.empty()) out.push_back({Segment::Kind::text, text, text_line});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    std::size_t end = s.find(close, inner);
    if (kind != '#') {  // a string literal may hold the closing characters
      for (std::size_t i = inner; i < s.size(); ++i) {
        if (s[i] == '\'' || s[i] == '"') {
          const char q = s[i];
          for (++i; i < s.size() && s[i] != q; ++i)
            if (s[i] == '\\') ++i;
          continue;
        }
        if (s.compare(i, 2, close) == 0) {
          end = i;
          break;
        }
      }
    }
    if (end == std::string::npos) fail(line, "a tag opened here is never closed with " + close);
    std::size_t body_end = end;
    bool strip_after = false, keep_newline = false;  // "-%}" strips what follows; "+%}" keeps its newline
    if (body_end > inner && s[body_end - 1] == '-') {
      strip_after = true;
      --body_end;
    } else if (body_end > inner && s[body_end - 1] == '+' && kind != '{') {
      keep_newline = true;
      --body_end;
    }
    const std::string body = s.substr(inner, body_end > inner ? body_end - inner : 0);
    if (kind == '{') out.push_back({Segment::Kind::output, body, line});
    else if (kind == '%') out.push_back({Segment::Kind::statement, body, line});
    count_lines(open, end + 2);
    pos = end + 2;
    strip_next = strip_after;
    line_starting = false;
    if (!strip_after && !keep_newline && kind != '{' && pos < s.size() && s[pos] == '\n') {  // trim_blocks
      ++pos;
      ++line;
      line_starting = true;
    } else if (strip_after) {
      line_starting = true;  // (its whitespace goes with strip_next)
    }
  }
  return out;
}

// ---- expressions

struct Token {
  enum class Kind { name, number, string, op, end } kind;
  std::string text;
  Json value;
};

std::vector<Token> lex(const std::string& s, int line, const Fail& fail) {
  std::vector<Token> out;
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (blank(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::name, s.substr(i, j - i), nullptr});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      bool real = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_' ||
                              (s[j] == '.' && !real && j + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[j + 1]))))) {
        real = real || s[j] == '.';
        ++j;
      }
      std::string digits = s.substr(i, j - i);
      digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
      Json v;
      try {
        if (real) v = std::stod(digits);
        else v = static_cast<std::int64_t>(std::stoll(digits));
      } catch (const std::exception&) {
        fail(line, "the number " + digits + " is out of range");
      }
      out.push_back({Token::Kind::number, digits, v});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\') {
          v += s[j];
          continue;
        }
        if (++j >= s.size()) break;
        switch (s[j]) {  // Python's escapes, as Jinja reads string literals
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          case '\n': break;
          default: fail(line, std::string("the string escape \\") + s[j] + " is not implemented");
        }
      }
      if (j >= s.size()) fail(line, "a string literal is not closed");
      out.push_back({Token::Kind::string, v, v});
      i = j + 1;
    } else {
      static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".", ",", ":",
                                        "|", "~", "+", "-", "*", "/", "%", "<", ">", "="};
      bool found = false;
      for (const char* op : ops)
        if (s.compare(i, std::char_traits<char>::length(op), op) == 0) {
          if (std::string(op) == "**") fail(line, "the operator ** is not implemented");
          out.push_back({Token::Kind::op, op, nullptr});
          i += std::char_traits<char>::length(op);
          found = true;
          break;
        }
      if (!found) fail(line, std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Token::Kind::end, "", nullptr});
  return out;
}

const std::set<std::string> kFilters = {"trim", "length", "count", "tojson", "string", "lower", "upper", "first", "last", "join",
                                        "default", "d", "list", "items", "capitalize", "title", "replace", "int", "abs"};
const std::set<std::string> kTests = {"defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
                                      "iterable", "sequence", "true", "false", "boolean", "eq", "equalto", "ne", "odd", "even",
                                      "lt", "gt", "le", "ge", "in"};
const std::set<std::string> kMethods = {"startswith", "endswith", "split", "strip", "lstrip", "rstrip", "replace", "lower",
                                        "upper", "title", "capitalize", "items", "keys", "values", "get"};
const std::set<std::string> kFunctions = {"namespace", "raise_exception", "range", "strftime_now"};

class Parser {
 public:
  Parser(std::vector<Token> t, int line, const Fail& fail) : t_(std::move(t)), line_(line), fail_(fail) {}

  ExprPtr expression() {
    if (++depth_ > kMaxDepth) fail_(line_, "expressions nest deeper than 64");
    ExprPtr e = or_();
    if (name_is("if")) {  // a if c else b
      ++at_;
      auto x = make(Expr::Kind::conditional);
      x->a = or_();
      x->b = std::move(e);
      if (name_is("else")) {
        ++at_;
        x->c = expression();
      }
      e = std::move(x);
    }
    --depth_;
    return e;
  }
  bool name_is(const char* n) const { return t_[at_].kind == Token::Kind::name && t_[at_].text == n; }
  bool op_is(const char* o) const { return t_[at_].kind == Token::Kind::op && t_[at_].text == o; }
  void expect_op(const char* o) {
    if (!op_is(o)) fail_(line_, std::string("expected '") + o + "', found '" + t_[at_].text + "'");
    ++at_;
  }
  std::string take_name(const char* what) {
    if (t_[at_].kind != Token::Kind::name) fail_(line_, std::string("expected ") + what + ", found '" + t_[at_].text + "'");
    return t_[at_++].text;
  }
  bool at_end() const { return t_[at_].kind == Token::Kind::end; }
  void expect_end() {
    if (!at_end()) fail_(line_, "unexpected '" + t_[at_].text + "'");
  }

 private:
  ExprPtr make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::binary);
    e->text = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }
  ExprPtr or_() {
    ExprPtr e = and_();
    while (name_is("or")) {
      ++at_;
      op();
      e = binary("or", std::move(e), and_());
    }
    return e;
  }
  ExprPtr and_() {
    ExprPtr e = not_();
    while (name_is("and")) {
      ++at_;
      op();
      e = binary("and", std::move(e), not_());
    }
    return e;
  }
  ExprPtr not_() {
    if (name_is("not")) {
      ++at_;
      auto e = make(Expr::Kind::unary);
      e->text = "not";
      deeper();
      e->a = not_();
      --depth_;
      return e;
    }
    return compare();
  }
  // Every operator, filter, test, attribute, subscript and call makes the tree one level
  // deeper on some side: their count bounds what the renderer recurses through.
  void op() {
    if (++ops_ > kMaxOps) fail_(line_, "an expression has more than 1024 operators");
  }
  void deeper() {
    if (++depth_ > kMaxDepth) fail_(line_, "expressions nest deeper than 64");
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    for (;; op()) {
      const Token& k = t_[at_];
      if (k.kind == Token::Kind::op && (k.text == "==" || k.text == "!=" || k.text == "<" || k.text == ">" || k.text == "<=" || k.text == ">=")) {
        ++at_;
        e = binary(k.text, std::move(e), math1());
      } else if (name_is("in")) {
        ++at_;
        e = binary("in", std::move(e), math1());
      } else if (name_is("not") && t_[at_ + 1].kind == Token::Kind::name && t_[at_ + 1].text == "in") {
        at_ += 2;
        e = binary("notin", std::move(e), math1());
      } else {
        return e;
      }
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (op_is("+") || op_is("-")) {
      this->op();
      const std::string op = t_[at_++].text;
      e = binary(op, std::move(e), concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (op_is("~")) {
      ++at_;
      op();
      e = binary("~", std::move(e), math2());
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = unary();
    while (op_is("*") || op_is("/") || op_is("//") || op_is("%")) {
      this->op();
      const std::string op = t_[at_++].text;
      e = binary(op, std::move(e), unary());
    }
    return e;
  }
  // Jinja's parse_unary: a sign applies to what follows without its filters, and the
  // filters then to the signed value ("-3|abs" is 3).
  ExprPtr unary(bool with_filters = true) {
    ExprPtr e;
    if (op_is("-") || op_is("+")) {
      const std::string op = t_[at_++].text;
      e = make(Expr::Kind::unary);
      e->text = op;
      deeper();
      e->a = unary(false);
      --depth_;
    } else {
      e = postfix(primary());
    }
    if (with_filters) return filters(std::move(e));
    return e;
  }
  // args: positional, then name=value
  void arguments(Expr& e) {
    expect_op("(");
    while (!op_is(")")) {
      if (t_[at_].kind == Token::Kind::name && t_[at_ + 1].kind == Token::Kind::op && t_[at_ + 1].text == "=") {
        e.keys.push_back(t_[at_].text);
        at_ += 2;
        e.args.push_back(expression());
      } else {
        if (!e.keys.empty()) fail_(line_, "a positional argument after a keyword argument");
        e.args.push_back(expression());
        ++e.positional;
      }
      if (!op_is(")")) expect_op(",");
    }
    ++at_;
  }
  ExprPtr filters(ExprPtr e) {
    for (;; op()) {
      if (op_is("|")) {
        ++at_;
        auto f = make(Expr::Kind::filter);
        f->text = take_name("a filter name");
        if (!kFilters.count(f->text)) fail_(line_, "the filter '" + f->text + "' is not implemented");
        f->a = std::move(e);
        if (op_is("(")) arguments(*f);
        e = std::move(f);
      } else if (name_is("is")) {
        ++at_;
        auto x = make(Expr::Kind::test);
        if (name_is("not")) {
          ++at_;
          x->negated = true;
        }
        x->text = take_name("a test name");
        if (!kTests.count(x->text)) fail_(line_, "the test '" + x->text + "' is not implemented");
        x->a = std::move(e);
        if (op_is("(")) arguments(*x);
        else if (t_[at_].kind == Token::Kind::string || t_[at_].kind == Token::Kind::number || (t_[at_].kind == Token::Kind::name && !name_is("and") && !name_is("or") && !name_is("else") && !name_is("if") && !name_is("in") && !name_is("not"))) {
          x->args.push_back(primary());  // "is eq 3", "is divisibleby 2": one argument without parentheses
          x->positional = 1;
        }
        e = std::move(x);
      } else {
        return e;
      }
    }
  }
  ExprPtr postfix(ExprPtr e) {
    for (;; op()) {
      if (op_is(".")) {
        ++at_;
        auto x = make(Expr::Kind::attribute);
        x->text = t_[at_].kind == Token::Kind::number ? t_[at_++].text : take_name("an attribute name");
        x->a = std::move(e);
        e = std::move(x);
      } else if (op_is("[")) {
        ++at_;
        ExprPtr parts[3];
        int colons = 0;
        while (!op_is("]")) {
          if (op_is(":")) {
            if (++colons > 2) fail_(line_, "a slice has at most two ':'");
            ++at_;
            continue;
          }
          if (parts[colons]) fail_(line_, "expected ']' or ':'");
          parts[colons] = expression();
        }
        ++at_;
        if (colons == 0) {
          if (!parts[0]) fail_(line_, "an empty subscript []");
          auto x = make(Expr::Kind::item);
          x->a = std::move(e);
          x->b = std::move(parts[0]);
          e = std::move(x);
        } else {
          auto x = make(Expr::Kind::slice);
          x->a = std::move(e);
          x->args.resize(3);
          for (int k = 0; k < 3; ++k) x->args[static_cast<std::size_t>(k)] = std::move(parts[k]);
          e = std::move(x);
        }
      } else if (op_is("(")) {
        auto x = make(Expr::Kind::call);
        if (e->kind == Expr::Kind::attribute) {
          if (!kMethods.count(e->text)) fail_(line_, "the method '" + e->text + "' is not implemented");
        } else if (e->kind == Expr::Kind::name) {
          if (!kFunctions.count(e->text)) fail_(line_, "the function '" + e->text + "' is not implemented");
        } else {
          fail_(line_, "only names and methods can be called");
        }
        x->a = std::move(e);
        arguments(*x);
        e = std::move(x);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Token& k = t_[at_];
    if (k.kind == Token::Kind::string) {
      std::string v;
      while (t_[at_].kind == Token::Kind::string) v += t_[at_++].text;  // adjacent literals join
      auto e = make(Expr::Kind::literal);
      e->value = v;
      return e;
    }
    if (k.kind == Token::Kind::number) {
      auto e = make(Expr::Kind::literal);
      e->value = t_[at_++].value;
      return e;
    }
    if (k.kind == Token::Kind::name) {
      ++at_;
      auto e = make(Expr::Kind::literal);
      if (k.text == "true" || k.text == "True") e->value = true;
      else if (k.text == "false" || k.text == "False") e->value = false;
      else if (k.text == "none" || k.text == "None") e->value = nullptr;
      else {
        e->kind = Expr::Kind::name;
        e->text = k.text;
      }
      return e;
    }
    if (op_is("(")) {
      ++at_;
      ExprPtr e = expression();
      if (op_is(",")) fail_(line_, "tuples are not implemented");
      expect_op(")");
      return e;
    }
    if (op_is("[")) {
      ++at_;
      auto e = make(Expr::Kind::list);
      while (!op_is("]")) {
        e->args.push_back(expression());
        if (!op_is("]")) expect_op(",");
      }
      ++at_;
      return e;
    }
    if (op_is("{")) {
      ++at_;
      auto e = make(Expr::Kind::dict);
      while (!op_is("}")) {
        if (t_[at_].kind != Token::Kind::string) fail_(line_, "dict keys must be string literals");
        e->keys.push_back(t_[at_++].text);
        expect_op(":");
        e->args.push_back(expression());
        if (!op_is("}")) expect_op(",");
      }
      ++at_;
      return e;
    }
    fail_(line_, k.kind == Token::Kind::end ? "an expression ends too early" : "unexpected '" + k.text + "'");
  }

  std::vector<Token> t_;
  std::size_t at_ = 0;
  int line_;
  const Fail& fail_;
  int depth_ = 0;
  int ops_ = 0;
};

ExprPtr whole_expression(const std::string& text, int line, const Fail& fail) {
  Parser p(lex(text, line, fail), line, fail);
  ExprPtr e = p.expression();
  p.expect_end();
  return e;
}

// ---- statements

class Blocks {
 public:
  Blocks(std::vector<Segment> s, const Fail& fail) : s_(std::move(s)), fail_(fail) {}

  // Nodes up to one of `ends` (its keyword returned in `stop`), or the template's end.
  Body body(const std::set<std::string>& ends, std::string& stop, int depth) {
    if (depth > kMaxDepth) fail_(s_[at_ - 1].line, "blocks nest deeper than 64");
    Body out;
    while (at_ < s_.size()) {
      const Segment& g = s_[at_++];
      if (g.kind == Segment::Kind::text) {
        out.push_back(node(Node::Kind::text, g.line));
        out.back().text = g.text;
        continue;
      }
      if (g.kind == Segment::Kind::output) {
        out.push_back(node(Node::Kind::output, g.line));
        out.back().expr = whole_expression(g.text, g.line, fail_);
        continue;
      }
      std::vector<Token> t = lex(g.text, g.line, fail_);
      if (t[0].kind != Token::Kind::name) fail_(g.line, "a statement tag without a statement");
      const std::string word = t[0].text;
      if (ends.count(word)) {
        stop = word;
        rest_ = std::move(t);
        return out;
      }
      Parser p(t, g.line, fail_);
      p.take_name("a statement");
      if (word == "if") {
        Node n = node(Node::Kind::if_, g.line);
        ExprPtr cond = p.expression();
        p.expect_end();
        for (;;) {
          std::string end;
          Body b = body({"elif", "else", "endif"}, end, depth + 1);
          n.branches.emplace_back(std::move(cond), std::move(b));
          if (end.empty()) fail_(g.line, "{% if %} without {% endif %}");
          Parser q(rest_, s_[at_ - 1].line, fail_);
          q.take_name("elif");
          if (end == "elif") {
            cond = q.expression();
            q.expect_end();
            continue;
          }
          q.expect_end();
          if (end == "else") {
            n.otherwise = body({"endif"}, end, depth + 1);
            if (end.empty()) fail_(g.line, "{% if %} without {% endif %}");
            Parser(rest_, s_[at_ - 1].line, fail_).take_name("endif");
          }
          break;
        }
        out.push_back(std::move(n));
      } else if (word == "for") {
        Node n = node(Node::Kind::for_, g.line);
        n.targets.push_back(p.take_name("a loop variable"));
        if (p.op_is(",")) {
          p.expect_op(",");
          n.targets.push_back(p.take_name("a loop variable"));
        }
        if (!p.name_is("in")) fail_(g.line, "expected 'in' in {% for %}");
        p.take_name("in");
        n.expr = p.expression();  // (its "a if c" is the loop's filter, as Jinja reads it)
        if (n.expr->kind == Expr::Kind::conditional && !n.expr->c) {
          n.filter = std::move(n.expr->a);
          n.expr = std::move(n.expr->b);
        }
        if (p.name_is("recursive")) fail_(g.line, "recursive loops are not implemented");
        p.expect_end();
        std::string end;
        Body b = body({"else", "endfor"}, end, depth + 1);
        if (end.empty()) fail_(g.line, "{% for %} without {% endfor %}");
        n.branches.emplace_back(nullptr, std::move(b));
        if (end == "else") {
          n.otherwise = body({"endfor"}, end, depth + 1);
          if (end.empty()) fail_(g.line, "{% for %} without {% endfor %}");
        }
        out.push_back(std::move(n));
      } else if (word == "set") {
        Node n = node(Node::Kind::set, g.line);
        n.text = p.take_name("a name to set");
        if (p.op_is(".")) {
          p.expect_op(".");
          n.attr = p.take_name("an attribute to set");
        }
        if (!p.op_is("=")) fail_(g.line, "block {% set %} ... {% endset %} and tuple assignment are not implemented");
        p.expect_op("=");
        n.expr = p.expression();
        p.expect_end();
        out.push_back(std::move(n));
      } else if (word == "break" || word == "continue") {
        p.expect_end();
        out.push_back(node(word == "break" ? Node::Kind::break_ : Node::Kind::continue_, g.line));
      } else {
        fail_(g.line, "the statement {% " + word + " %} is not implemented");
      }
    }
    return out;
  }

 private:
  static Node node(Node::Kind k, int line) {
    Node n{};
    n.kind = k;
    n.line = line;
    return n;
  }
  std::vector<Segment> s_;
  std::size_t at_ = 0;
  std::vector<Token> rest_;  // the tokens of the tag that ended the last body
  const Fail& fail_;
};

}  // namespace

ChatTemplate ChatTemplate::parse(std::string source, const std::string& where) {
  const Fail fail{where};
  if (source.size() > kMaxSource) fail(1, "is larger than 256 KiB");
  // Jinja's newline handling: \r\n and \r read as \n, one trailing newline dropped.
  std::string s;
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  Blocks b(segments(s, fail), fail);
  std::string stop;
  Body body = b.body({"endif", "endfor", "elif", "else"}, stop, 0);
  if (!stop.empty()) fail(1, "{% " + stop + " %} without its opening statement");
  ChatTemplate t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  t.where_ = where;
  return t;
}

}  // namespace infer
