// infer — what a chat template's render works with (chat_template.hpp): its values, read by
// reference, and the budget every render is held to. Shared by the renderer
// (chat_template_render.cpp), the values' Python behaviour (chat_template_value.cpp) and the
// filters, tests and methods (chat_template_builtins.cpp), and by no one else.
//
// A value points into JSON that something owns: the caller's context (which outlives the
// render) or a value the render made (held by shared_ptr, so every part handed out keeps it
// alive). Reading `messages`, `messages[i]` or `message.content` therefore copies nothing, and
// values are never changed once made (Jinja's values are immutable; a namespace's attributes
// are bindings, not changes), so sharing them is safe. What a render does make or touch is
// charged to its Budget before it is made, so a refusal comes before the allocation.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat_template.hpp"
#include "../common/json.hpp"

namespace infer::jinja {

class Budget {
 public:
  Budget(const std::string& where, const RenderLimits& limits);
  [[noreturn]] void fail(int line, const std::string& what) const;
  void step(int line);                               // a statement or expression evaluated
  void made(std::uint64_t bytes, int line);          // about to make a value of this many bytes (also work)
  void work(std::uint64_t bytes, int line);          // about to read, copy, compare or search this many
  void size(std::uint64_t n, int line) const;        // a string's bytes or a list's items: within value_size
  const RenderLimits& limits() const { return limits_; }
  const RenderStats& stats() const { return stats_; }

 private:
  void clock(int line) const;
  const std::string& where_;
  const RenderLimits& limits_;
  RenderStats stats_;
  std::chrono::steady_clock::time_point deadline_;
};

struct Value {
  // loop: a for loop's `loop`, its attributes computed when read (index0 and length held).
  enum class Kind { undefined, json, ns, loop } kind = Kind::undefined;
  std::shared_ptr<const Json> owner;  // what `p` points into; null: the caller's context
  const Json* p = nullptr;
  std::shared_ptr<std::map<std::string, Value>> ns;  // a namespace(): shared, so assignments show through copies
  std::string name;                                  // undefined: the name that was missing
  std::string view;                                  // a dict's keys(), values() or items(): printed as Python prints them
  std::int64_t index0 = 0, length = 0;               // loop

  static Value of(Json v);                             // a value the render made
  static Value at(const Value& whole, const Json& part);  // a part of `whole`, shared with it
  static Value ref(const Json& v);                     // the caller's, alive for the whole render
  static Value missing(std::string n);
  static Value boolean(bool b);       // (shared constants: no allocation)
  static Value integer(std::int64_t i);  // (small ones shared)
  static Value loop(std::int64_t index0, std::int64_t length);
  bool undefined() const { return kind == Kind::undefined; }
  bool is_null() const { return kind == Kind::json && p->is_null(); }
  const Json& j() const { return *p; }
};

// Arguments after the first: positional then keyword, by name.
struct Args {
  std::vector<Value> pos;
  std::map<std::string, Value> kw;
  const Value* get(std::size_t i, const std::string& name) const {
    if (i < pos.size()) return &pos[i];
    const auto it = kw.find(name);
    return it == kw.end() ? nullptr : &it->second;
  }
  bool empty() const { return pos.empty() && kw.empty(); }
};

// The bytes a copy of `v` holds (nodes, strings, keys), counted without making it; fails
// when `v` nests more than 128 deep (values nest only through literals and items, so nothing
// that recurses through them goes deeper).
std::uint64_t footprint(const Json& v, Budget& b, int line);
constexpr std::uint64_t kNodeBytes = 96;  // a JSON node, its slot in a list or dict, its heap block (measured: split's pieces)

// Python's behaviour of values, as Jinja shows it.
bool truth(const Value& v);
bool equal(const Value& a, const Value& b, Budget& budget, int line);
bool contains(const Value& item, const Value& in, Budget& budget, int line);
int compare(const Json& a, const Json& b, bool& ok);  // numbers with numbers, strings with strings
bool is_int(const Json& j);                           // (a JSON integer past INT64_MAX reads as a float)
bool py_space(char32_t c);                            // Python's str.isspace

// str() of a value as Jinja prints it (a list's or dict's items by repr), made within the
// budget: at most value_size bytes.
std::string str(const Value& v, Budget& b, int line);
// json.dumps(v, ensure_ascii=False[, indent]) (transformers' tojson), at most value_size bytes.
std::string to_json(const Json& v, int indent, Budget& b, int line);
// A short description of `v` for an error message (a long string or big list is cut).
std::string brief(const Json& v);
std::string py_float(double d);

const Json& need(const Value& v, Budget& b, int line);
const std::string& need_string(const Value& v, Budget& b, int line, const char* what);
std::int64_t need_int(const Value& v, Budget& b, int line, const char* what);

// UTF-8 text as Python's str sees it (code points; ill-formed bytes decode as U+FFFD), walked
// without decoding the whole string.
std::size_t count_chars(std::string_view s);
// The code point starting at byte `at` of `s` as UTF-8, and the byte after it.
std::string char_at(std::string_view s, std::size_t& at);
std::u32string decode(std::string_view s, Budget& b, int line);  // charged: 4 bytes a byte
// The first `needle` in `hay` at or after `from`, or npos, in time linear in both (glibc's
// two-way memmem: std::string::find compares naively, O(n m) for a long needle of a's).
std::size_t find_text(std::string_view hay, std::string_view needle, std::size_t from);
std::string encode(const std::u32string& s, Budget& b, int line);

// The builtins (chat_template_builtins.cpp). `name` is the filter's, test's, function's or
// method's name as written; what none of them knows is refused naming it.
Value filter(const std::string& name, const Value& v, const Args& a, Budget& b, int line);
bool test(const std::string& name, const Value& v, const Args& a, Budget& b, int line);
Value call_function(const std::string& name, const Args& a, Budget& b, int line);
Value call_method(const std::string& name, const Value& self, const Args& a, Budget& b, int line);

}  // namespace infer::jinja
