// infer — a chat template's syntax tree (chat_template.hpp): what the parser
// (chat_template_parse.cpp) makes and the renderer (chat_template_render.cpp) walks. Shared by
// those two only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../common/json.hpp"

namespace infer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // text
    attribute,  // a.text
    item,       // a[b]
    slice,      // a[b:c:d] (null parts absent)
    call,       // a(args, kwargs)
    filter,     // a | text(args)
    test,       // a is [not] text(args)   (negated)
    unary,      // op a: "not", "-"
    binary,     // a op b: or and == != < > <= >= in notin + - * / // % ~
    list,       // [args]
    dict,       // {keys[i]: args[i]}
    conditional // b if a else c
  } kind;
  Json value;        // literal
  std::string text;  // name, attribute, filter, test, op
  bool negated = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::string> keys;    // call and filter keyword names (args after the positional ones); dict keys
  std::size_t positional = 0;       // call/filter: how many of args are positional
  int line = 0;                     // for errors
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum class Kind { text, output, if_, for_, set, break_, continue_ } kind;
  std::string text;                  // text; set: the name (or "ns.attr" as target + attr)
  std::string attr;                  // set: the namespace attribute ("" for a plain name)
  std::vector<std::string> targets;  // for: the loop names (one, or two for unpacking)
  ExprPtr expr;                      // output, set, for (the iterable)
  ExprPtr filter;                    // for ... if cond
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif; for: the body in branches[0]
  Body otherwise;                    // else
  int line = 0;
};

}  // namespace infer::jinja
