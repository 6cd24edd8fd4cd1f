// infer — a response format's grammar (json_schema.hpp): a schema compiled, keyword by keyword,
// into grammar fragments; every refusal names the keyword or bound and the schema's pointer.
#include "json_schema.hpp"

#include <array>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "json_pieces.hpp"

namespace infer::constrain {

namespace {

const std::set<std::string_view> kIgnored = {"description", "title",   "$comment", "$schema",  "$id",
                                              "default",     "examples", "deprecated", "readOnly", "writeOnly",
                                              "$defs",       "definitions"};
const std::set<std::string_view> kCompiled = {"type",     "properties", "required", "additionalProperties",
                                              "enum",     "const",      "items",    "minItems",
                                              "maxItems", "minLength",  "maxLength", "anyOf", "$ref"};

enum Type : unsigned {
  kObject = 1,
  kArray = 2,
  kString = 4,
  kNumber = 8,
  kInteger = 16,
  kBoolean = 32,
  kNull = 64,
  kAny = 127,
};

const std::map<std::string_view, Type> kTypeNames = {{"object", kObject},   {"array", kArray},     {"string", kString},
                                                     {"number", kNumber},   {"integer", kInteger}, {"boolean", kBoolean},
                                                     {"null", kNull}};

// A key as a JSON pointer's reference token (RFC 6901).
std::string token(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

bool is_integral(const Json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

unsigned type_of(const Json& v) {
  switch (v.type()) {
    case Json::value_t::object: return kObject;
    case Json::value_t::array: return kArray;
    case Json::value_t::string: return kString;
    case Json::value_t::boolean: return kBoolean;
    case Json::value_t::null: return kNull;
    default: return is_integral(v) ? kNumber | kInteger : kNumber;
  }
}

class Compiler {
 public:
  explicit Compiler(const Json& root) : root_(root), pieces_(b_) {}

  Grammar run() {
    try {
      const std::uint32_t v = b_.node(), fin = b_.node();
      b_.end(fin);
      const std::uint32_t start = pieces_.ws(v);
      value(root_, "#", v, fin);
      return std::move(b_).finish(start, "json_schema");
    } catch (const GrammarLimit& e) {
      throw Unsupported("schema at #: " + e.what);
    }
  }

 private:
  [[noreturn]] static void refuse(const std::string& what, const std::string& path) { throw Unsupported(what + " at " + path); }

  std::uint32_t count(const Json& s, const char* key, std::uint32_t limit, const std::string& path) {
    try {
      return static_cast<std::uint32_t>(json_int(s[key], key, 0, limit));
    } catch (const std::runtime_error& e) {
      refuse(std::string("schema keyword \"") + key + "\": " + e.what(), path);
    }
  }

  // Keywords beside `main` other than the ignored ones and `allowed` are refused.
  static void alone(const Json& s, std::string_view main, const std::set<std::string_view>& allowed, const std::string& path) {
    for (const auto& [k, v] : s.items())
      if (k != main && !kIgnored.contains(k) && !allowed.contains(k))
        refuse("unsupported schema keyword \"" + k + "\" beside \"" + std::string(main) + "\"", path);
  }

  void value(const Json& s, const std::string& path, std::uint32_t from, std::uint32_t to) {
    if (++subschemas_ > kMaxSubschemas) refuse("the schema has more than " + std::to_string(kMaxSubschemas) + " subschemas", path);
    try {
      if (s.is_boolean()) {
        if (s.get<bool>()) pieces_.any_value(from, to);
        return;  // false: no value
      }
      if (!s.is_object()) refuse("a schema must be an object or a boolean", path);
      for (const auto& [k, v] : s.items()) {
        if (k == "$id" && path != "#") refuse("unsupported schema keyword \"$id\" (below the root)", path);
        if (!kIgnored.contains(k) && !kCompiled.contains(k)) refuse("unsupported schema keyword \"" + k + "\"", path);
      }
      if (s.contains("$ref")) {
        alone(s, "$ref", {}, path);
        return reference(s["$ref"], path, from, to);
      }
      if (s.contains("anyOf")) {
        alone(s, "anyOf", {}, path);
        const Json& alts = s["anyOf"];
        if (!alts.is_array() || alts.empty()) refuse("\"anyOf\" must be a non-empty array of schemas", path);
        for (std::size_t i = 0; i < alts.size(); ++i) value(alts[i], path + "/anyOf/" + std::to_string(i), from, to);
        return;
      }
      if (s.contains("enum") || s.contains("const")) {
        alone(s, s.contains("enum") ? "enum" : "const", {"type", "const"}, path);
        return enumeration(s, path, from, to);
      }
      typed(s, types(s, path), path, from, to);
    } catch (const GrammarLimit& e) {
      refuse(e.what, path);
    }
  }

  unsigned types(const Json& s, const std::string& path) {
    if (!s.contains("type")) {  // the types whose keywords are there, else any
      unsigned t = 0;
      for (const char* k : {"properties", "required", "additionalProperties"})
        if (s.contains(k)) t |= kObject;
      for (const char* k : {"items", "minItems", "maxItems"})
        if (s.contains(k)) t |= kArray;
      for (const char* k : {"minLength", "maxLength"})
        if (s.contains(k)) t |= kString;
      return t ? t : kAny;
    }
    const Json& t = s["type"];
    auto one = [&](const Json& name) -> unsigned {
      const auto it = name.is_string() ? kTypeNames.find(name.get_ref<const std::string&>()) : kTypeNames.end();
      if (it == kTypeNames.end()) refuse("\"type\" " + name.dump() + " is not a JSON Schema type", path);
      return it->second;
    };
    if (!t.is_array()) return one(t);
    if (t.empty()) refuse("\"type\" is an empty list", path);
    unsigned all = 0;
    for (const Json& name : t) all |= one(name);
    return all;
  }

  static bool keyed(const Json& s) {
    for (const char* k : {"properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength", "maxLength"})
      if (s.contains(k)) return true;
    return false;
  }

  void typed(const Json& s, unsigned t, const std::string& path, std::uint32_t from, std::uint32_t to) {
    if ((t | kInteger) == kAny && !keyed(s)) return pieces_.any_value(from, to);  // nothing narrows it
    if (t & kObject) object(s, path, from, to);
    if (t & kArray) array(s, path, from, to);
    if (t & kString) string(s, path, from, to);
    if (t & kNumber) pieces_.number(from, to);
    else if (t & kInteger) pieces_.integer(from, to);
    if (t & kBoolean) pieces_.literals(from, {"true", "false"}, to);
    if (t & kNull) pieces_.literal(from, "null", to);
  }

  void enumeration(const Json& s, const std::string& path, std::uint32_t from, std::uint32_t to) {
    std::vector<const Json*> values;
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) refuse("\"enum\" must be an array", path);
      for (const Json& v : s["enum"])
        if (!s.contains("const") || v == s["const"]) values.push_back(&v);
    } else {
      values.push_back(&s["const"]);
    }
    const unsigned t = s.contains("type") ? types(s, path) : kAny;
    std::vector<std::string> texts;
    for (const Json* v : values)
      if (type_of(*v) & t) texts.push_back(v->dump());
    pieces_.literals(from, texts, to);
  }

  void object(const Json& s, const std::string& path, std::uint32_t from, std::uint32_t to) {
    const Json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props && !props->is_object()) refuse("\"properties\" must be an object", path);
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) refuse("\"required\" must be an array of property names", path);
      for (const Json& name : r) {
        if (!name.is_string()) refuse("\"required\" must be an array of property names", path);
        if (!props || !props->contains(name.get_ref<const std::string&>()))
          refuse("required property " + name.dump() + " is not among \"properties\"", path);
        required.insert(name.get<std::string>());
      }
    }
    bool more = true;  // additionalProperties: only where there are no properties
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (a.is_boolean()) more = a.get<bool>();
      else if (!(a.is_object() && a.empty()))
        refuse("unsupported schema keyword \"additionalProperties\" (a schema; only true or false are compiled)", path);
    }
    if (!props || props->empty()) {
      if (more) return pieces_.any_object(from, to);
      const std::uint32_t open = b_.node();
      b_.byte(from, '{', pieces_.ws(open));
      b_.byte(open, '}', to);
      return;
    }
    // at[i][f]: the properties before i are done or left out; f: one was written (a comma next).
    const std::size_t k = props->size();
    std::vector<std::array<std::uint32_t, 2>> at(k + 1);
    for (auto& a : at) a = {b_.node(), b_.node()};
    b_.byte(from, '{', pieces_.ws(at[0][0]));
    std::size_t i = 0;
    for (const auto& [name, schema] : props->items()) {
      const std::uint32_t key = b_.node(), colon = b_.node(), v = b_.node();
      b_.eps(at[i][0], key);
      b_.byte(at[i][1], ',', pieces_.ws(key));
      pieces_.literal(key, Json(name).dump(), pieces_.ws(colon));
      b_.byte(colon, ':', pieces_.ws(v));
      value(schema, path + "/properties/" + token(name), v, pieces_.ws(at[i + 1][1]));
      if (!required.contains(name)) {
        b_.eps(at[i][0], at[i + 1][0]);
        b_.eps(at[i][1], at[i + 1][1]);
      }
      ++i;
    }
    b_.byte(at[k][0], '}', to);
    b_.byte(at[k][1], '}', to);
  }

  void array(const Json& s, const std::string& path, std::uint32_t from, std::uint32_t to) {
    const Json* items = s.contains("items") ? &s["items"] : nullptr;
    if (items && items->is_array()) refuse("unsupported schema keyword \"items\" (a list of schemas)", path);
    const std::uint32_t min = s.contains("minItems") ? count(s, "minItems", 1 << 24, path) : 0;
    std::uint32_t max = s.contains("maxItems") ? count(s, "maxItems", 1 << 24, path) : kUnbounded;
    if (items && items->is_boolean() && !items->get<bool>()) max = 0;
    if (min > max) refuse("\"minItems\" " + std::to_string(min) + " is above the most items allowed, " + std::to_string(max), path);
    const std::string item_path = path + "/items";
    const std::uint32_t open = b_.node();
    b_.byte(from, '[', pieces_.ws(open));
    if (min == 0) b_.byte(open, ']', to);
    if (max == 0) return;
    auto item = [&](std::uint32_t a, std::uint32_t z) {
      if (items) value(*items, item_path, a, z);
      else pieces_.any_value(a, z);
    };
    if (max == kUnbounded && min <= 1) {  // one copy of the item, in place: [ item (, item)* ]
      const std::uint32_t before = b_.node(), after = b_.node();
      b_.eps(open, before);
      item(before, pieces_.ws(after));
      b_.byte(after, ',', pieces_.ws(before));
      b_.byte(after, ']', to);
      return;
    }
    // Counted: the item made once as a rule, called from a chain of positions.
    const std::uint32_t last = max == kUnbounded ? min : max;
    if (std::uint64_t{last} * (2 * (kMaxWhitespace + 1) + 2) > b_.room())
      refuse("an array of up to " + std::to_string(last) + " counted items needs more grammar states than allowed", path);
    const std::uint32_t entry = b_.node(), fin = b_.node();
    b_.end(fin);
    item(entry, fin);
    std::uint32_t before = b_.node();
    b_.eps(open, before);
    for (std::uint32_t n = 1; n <= last; ++n) {
      const std::uint32_t after = b_.node();
      b_.call(before, entry, pieces_.ws(after), 0);
      if (n >= min) b_.byte(after, ']', to);
      if (n < last) {
        before = b_.node();
        b_.byte(after, ',', pieces_.ws(before));
      } else if (max == kUnbounded) {
        b_.byte(after, ',', pieces_.ws(before));  // the last position again
      }
    }
  }

  void string(const Json& s, const std::string& path, std::uint32_t from, std::uint32_t to) {
    const std::uint32_t min = s.contains("minLength") ? count(s, "minLength", 1 << 24, path) : 0;
    const std::uint32_t max = s.contains("maxLength") ? count(s, "maxLength", 1 << 24, path) : kUnbounded;
    if (min > max) refuse("\"minLength\" " + std::to_string(min) + " is above \"maxLength\" " + std::to_string(max), path);
    if (JsonPieces::string_states(min, max) > b_.room())
      refuse("a string of " + std::to_string(min) + " to " + (max == kUnbounded ? "any" : std::to_string(max)) +
                 " characters needs more grammar states than allowed",
             path);
    pieces_.string(from, min, max, to);
  }

  void reference(const Json& ref, const std::string& path, std::uint32_t from, std::uint32_t to) {
    if (!ref.is_string() || !ref.get_ref<const std::string&>().starts_with("#"))
      refuse("\"$ref\" " + ref.dump() + " is not a local JSON pointer (\"#/$defs/NAME\")", path);
    const std::string& pointer = ref.get_ref<const std::string&>();
    auto [it, fresh] = rules_.try_emplace(pointer, 0);
    if (fresh) {
      const Json& target = resolve(pointer, path);
      const std::uint32_t entry = it->second = b_.node(), fin = b_.node();
      b_.end(fin);
      value(target, pointer, entry, fin);
    }
    b_.call(from, it->second, to, 1, "$ref \"" + pointer + "\" at " + path);
  }

  const Json& resolve(const std::string& pointer, const std::string& path) {
    const Json* at = &root_;
    std::size_t i = 1;
    if (pointer.size() > 1 && pointer[1] != '/') refuse("\"$ref\" \"" + pointer + "\" is not a local JSON pointer", path);
    while (i < pointer.size()) {
      const std::size_t next = std::min(pointer.find('/', i + 1), pointer.size());
      std::string key;
      for (std::size_t j = i + 1; j < next; ++j) {
        if (pointer[j] == '~' && j + 1 < next && (pointer[j + 1] == '0' || pointer[j + 1] == '1')) key += pointer[++j] == '0' ? '~' : '/';
        else key += pointer[j];
      }
      if (at->is_object() && at->contains(key)) at = &(*at)[key];
      else if (at->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos && key.size() < 10 &&
               std::stoul(key) < at->size())
        at = &(*at)[std::stoul(key)];
      else refuse("\"$ref\" \"" + pointer + "\" points at nothing in the schema", path);
      i = next;
    }
    return *at;
  }

  const Json& root_;
  GrammarBuilder b_;
  JsonPieces pieces_;
  std::map<std::string, std::uint32_t> rules_;  // a $ref's pointer -> its rule's entry
  std::size_t subschemas_ = 0;
};

}  // namespace

Grammar json_schema_grammar(const Json& schema) { return Compiler(schema).run(); }

Grammar json_object_grammar() {
  GrammarBuilder b;
  JsonPieces pieces(b);
  const std::uint32_t v = b.node(), fin = b.node();
  b.end(fin);
  const std::uint32_t start = pieces.ws(v);
  pieces.any_object(v, fin);
  return std::move(b).finish(start, "json_object");
}

}  // namespace infer::constrain
