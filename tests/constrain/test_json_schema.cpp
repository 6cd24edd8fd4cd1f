// The schema compiler (infer/constrain/json_schema.hpp): what it refuses, with the exact message
// (the server's 400 quotes it), and what the grammars it makes take, byte by byte (byte_vocab.hpp:
// the mask and advance() checked against each other on every byte).
#include <doctest/doctest.h>

#include <string>

#include "infer/common/json.hpp"
#include "infer/constrain/json_schema.hpp"
#include "tests/constrain/byte_vocab.hpp"
#include "tests/error_of.hpp"

namespace {

using infer::constrain::Grammar;
using infer::constrain::json_schema_grammar;
using ringattn::test::error_of;

Grammar schema(const std::string& text) { return json_schema_grammar(infer::parse_json(text)); }

std::string refusal(const std::string& text) {
  try {
    (void)schema(text);
  } catch (const infer::constrain::Unsupported& e) {
    return e.what();
  }
  return "(compiled)";
}

}  // namespace

TEST_CASE("constrain: refused schemas name the keyword or bound and where") {
  CHECK(refusal(R"({"type":"object","properties":{"name":{"type":"string","pattern":"^a"}}})") ==
        "unsupported schema keyword \"pattern\" at #/properties/name");
  CHECK(refusal(R"({"type":"string","format":"date-time"})") == "unsupported schema keyword \"format\" at #");
  CHECK(refusal(R"({"type":"array","items":{"oneOf":[{"type":"null"}]}})") == "unsupported schema keyword \"oneOf\" at #/items");
  CHECK(refusal(R"({"properties":{"a/b~":{"minimum":3}}})") == "unsupported schema keyword \"minimum\" at #/properties/a~1b~0");
  CHECK(refusal(R"({"anyOf":[{"type":"string"}],"type":"string"})") == "unsupported schema keyword \"type\" beside \"anyOf\" at #");
  CHECK(refusal(R"({"$ref":"#/$defs/a","type":"string","$defs":{"a":{}}})") ==
        "unsupported schema keyword \"type\" beside \"$ref\" at #");
  CHECK(refusal(R"({"enum":["a"],"maxLength":3})") == "unsupported schema keyword \"maxLength\" beside \"enum\" at #");
  CHECK(refusal(R"({"$ref":"http://example.com/s.json"})") ==
        "\"$ref\" \"http://example.com/s.json\" is not a local JSON pointer (\"#/$defs/NAME\") at #");
  CHECK(refusal(R"({"anyOf":[{"$ref":"#/$defs/missing"}]})") == "\"$ref\" \"#/$defs/missing\" points at nothing in the schema at #/anyOf/0");
  CHECK(refusal(R"({"type":"strin"})") == "\"type\" \"strin\" is not a JSON Schema type at #");
  CHECK(refusal(R"({"type":[]})") == "\"type\" is an empty list at #");
  CHECK(refusal(R"(3)") == "a schema must be an object or a boolean at #");
  CHECK(refusal(R"({"type":"array","items":[{"type":"null"}]})") == "unsupported schema keyword \"items\" (a list of schemas) at #");
  CHECK(refusal(R"({"type":"object","properties":{"a":{}},"additionalProperties":{"type":"string"}})") ==
        "unsupported schema keyword \"additionalProperties\" (a schema; only true or false are compiled) at #");
  CHECK(refusal(R"({"type":"object","properties":{"a":{}},"required":["b"]})") == "required property \"b\" is not among \"properties\" at #");
  CHECK(refusal(R"({"type":"array","minItems":3,"maxItems":2})") == "\"minItems\" 3 is above the most items allowed, 2 at #");
  CHECK(refusal(R"({"type":"string","minLength":3,"maxLength":2})") == "\"minLength\" 3 is above \"maxLength\" 2 at #");
  CHECK(refusal(R"({"type":"string","maxLength":-1})").starts_with("schema keyword \"maxLength\": "));
  CHECK(refusal(R"({"type":"string","maxLength":1.5})").ends_with(" at #"));
  CHECK(refusal(R"({"properties":{"x":{"$id":"x"}}})") == "unsupported schema keyword \"$id\" (below the root) at #/properties/x");
  CHECK(refusal(R"({"anyOf":[]})") == "\"anyOf\" must be a non-empty array of schemas at #");
  // Recursion that consumes nothing, and recursion that never ends.
  CHECK(refusal(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})") ==
        "schema at #: $ref \"#/$defs/a\" at #/$defs/a/anyOf/0 recurses before the value has a byte (left recursion)");
  CHECK(refusal(R"({"type":"object","properties":{"next":{"$ref":"#"}},"required":["next"]})") ==
        "schema at #: no JSON text satisfies it within 32 levels of recursion");
  CHECK(refusal("false") == "schema at #: no JSON text satisfies it within 32 levels of recursion");
  // Bounds against hostile schemas: states, subschemas.
  CHECK(refusal(R"({"type":"string","maxLength":16000000})") ==
        "a string of 0 to 16000000 characters needs more grammar states than allowed at #");
  CHECK(refusal(R"({"type":"array","items":{"type":"null"},"maxItems":1000000})") ==
        "an array of up to 1000000 counted items needs more grammar states than allowed at #");
  CHECK(refusal(R"({"enum":[")" + std::string(300000, 'x') + R"("]})") == "the grammar needs more than 262144 states at #");
  {
    std::string many = R"({"anyOf":[)";
    for (int i = 0; i < 10001; ++i) many += std::string(i ? "," : "") + R"({"type":"null"})";
    CHECK(refusal(many + "]}") == "the schema has more than 10000 subschemas at #/anyOf/9999");
  }
  {  // 2^40 paths of $refs before a byte: refused when it passes 2^22, not walked
    std::string defs;
    for (int i = 0; i < 40; ++i)
      defs += "\"d" + std::to_string(i) + "\":{\"anyOf\":[{\"$ref\":\"#/$defs/d" + std::to_string(i + 1) + "\"},{\"$ref\":\"#/$defs/d" +
              std::to_string(i + 1) + "\"}]},";
    CHECK(refusal(R"({"$ref":"#/$defs/d0","$defs":{)" + defs + R"("d40":{"type":"null"}}})") ==
          "schema at #: its alternatives branch into more than 4194304 paths before a byte");
  }
  // Every refusal is an InvalidArgument (the server's 400).
  CHECK_THROWS_AS((void)schema(R"({"not":{}})"), ringattn::InvalidArgument);
}

TEST_CASE("constrain: an OpenAI strict schema takes its objects, in order, with bounded whitespace") {
  const Grammar g = schema(R"({"type":"object","properties":{
      "name":{"type":"string","description":"who"},
      "age":{"type":"integer"},
      "tags":{"type":"array","items":{"type":"string"}}},
    "required":["name","age","tags"],"additionalProperties":false})");
  CHECK(test::accepts(g, R"({"name":"Bob","age":42,"tags":["a","b"]})"));
  CHECK(test::accepts(g, R"({"name":"","age":-7,"tags":[]})"));
  // At most kMaxWhitespace (1) byte of whitespace between tokens: one space or newline, no indentation.
  CHECK(test::accepts(g, "{\"name\": \"Bob\", \"age\": 0,\n\"tags\": [\"x\"]}"));
  CHECK_FALSE(test::accepts(g, "{\n  \"name\": \"Bob\",\n  \"age\": 0,\n  \"tags\": [\n    \"x\"\n  ]\n}"));
  CHECK(test::accepts(g, R"( {"name":"Bob","age":1,"tags":[]})"));   // 1 before the text
  CHECK_FALSE(test::accepts(g, R"(  {"name":"Bob","age":1,"tags":[]})"));  // 2
  CHECK(test::accepts(g, R"({"name" :"Bob","age":1,"tags":[]})"));
  CHECK_FALSE(test::accepts(g, R"({"name"  :"Bob","age":1,"tags":[]})"));
  CHECK_FALSE(test::accepts(g, R"({"name":"Bob","age":1,"tags":[]} )"));  // nothing after the text
  CHECK_FALSE(test::accepts(g, R"({"name":"Bob","age":1})"));             // a required one missing
  CHECK_FALSE(test::accepts(g, R"({"age":1,"name":"Bob","tags":[]})"));   // the schema's order
  CHECK_FALSE(test::accepts(g, R"({"name":"Bob","age":1,"tags":[],"x":1})"));
  CHECK_FALSE(test::accepts(g, R"({"name":"Bob","age":1.5,"tags":[]})"));
  CHECK_FALSE(test::accepts(g, R"({"name":"Bob","age":1e3,"tags":[]})"));
  CHECK_FALSE(test::accepts(g, R"({"name":"Bob","age":01,"tags":[]})"));
  CHECK_FALSE(test::accepts(g, R"({"name":"Bob","age":1,"tags":[1]})"));
  CHECK_FALSE(test::accepts(g, R"({"name":"Bob","age":1,"tags":["a",]})"));
}

TEST_CASE("constrain: optional properties may be left out, the others not") {
  const Grammar g = schema(R"({"type":"object","properties":{"a":{"type":"null"},"b":{"type":"boolean"},"c":{"type":"null"}},
                               "required":["b"]})");
  CHECK(test::accepts(g, R"({"b":true})"));
  CHECK(test::accepts(g, R"({"a":null,"b":false})"));
  CHECK(test::accepts(g, R"({"b":true,"c":null})"));
  CHECK(test::accepts(g, R"({"a":null,"b":true,"c":null})"));
  CHECK_FALSE(test::accepts(g, R"({})"));
  CHECK_FALSE(test::accepts(g, R"({"a":null})"));
  CHECK_FALSE(test::accepts(g, R"({"a":null,,"b":true})"));
  CHECK_FALSE(test::accepts(g, R"({,"b":true})"));
  const Grammar empty = schema(R"({"type":"object","additionalProperties":false})");
  CHECK(test::accepts(empty, "{ }"));
  CHECK_FALSE(test::accepts(empty, R"({"a":1})"));
  const Grammar any = schema(R"({"type":"object"})");
  CHECK(test::accepts(any, R"({"a":1,"b":{"c":[true,null,"x"]}})"));
  CHECK_FALSE(test::accepts(any, "[]"));
}

TEST_CASE("constrain: numbers and integers, within the digit bounds") {
  const Grammar n = schema(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "12", "-0.5", "3.25e+10", "1E-2", "1e5", "1234567890123456", "0.1234567890123456", "1e99"})
    CHECK_MESSAGE(test::accepts(n, ok), ok);
  for (const char* bad : {"01", "+1", ".5", "1.", "1e", "1e+", "--1", "12345678901234567", "0.12345678901234567", "1e100", "NaN", "1 "})
    CHECK_MESSAGE(!test::accepts(n, bad), bad);
  const Grammar i = schema(R"({"type":"integer"})");
  CHECK(test::accepts(i, "-42"));
  CHECK_FALSE(test::accepts(i, "4.0"));
  CHECK_FALSE(test::accepts(i, "4e1"));
  const Grammar both = schema(R"({"type":["integer","null","boolean"]})");
  for (const char* ok : {"7", "null", "true", "false"}) CHECK(test::accepts(both, ok));
  CHECK_FALSE(test::accepts(both, "\"7\""));
}

TEST_CASE("constrain: strings are well-formed UTF-8 or escapes, their lengths counted in characters") {
  const Grammar s = schema(R"({"type":"string"})");
  for (const char* ok : {R"("")", R"("a\"b\\c\/d\b\f\n\r\t")", R"("\u00e9\u20AC")", R"("\ud83d\ude00")", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
                         "\"\x7f\""})
    CHECK_MESSAGE(test::accepts(s, ok), ok);
  for (const char* bad : {R"("\x")", R"("\u12")", R"("\ud83d")", R"("\ud83dx")", R"("\ude00")", "\"a\nb\"", "\"\t\"",
                          "\"\xc0\x80\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\x80\"", "\"\xe2\x82\"", R"("a)", R"('a')"})
    CHECK_MESSAGE(!test::accepts(s, bad), bad);
  const Grammar bounded = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  CHECK_FALSE(test::accepts(bounded, R"("a")"));
  CHECK(test::accepts(bounded, R"("ab")"));
  CHECK(test::accepts(bounded, "\"\xc3\xa9\xf0\x9f\x98\x80\\n\""));       // é, 😀 and \n: three
  CHECK(test::accepts(bounded, R"("\ud83d\ude00\u00e9")"));              // a pair is one character
  CHECK_FALSE(test::accepts(bounded, R"("abcd")"));
  CHECK_FALSE(test::accepts(bounded, "\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\""));
}

TEST_CASE("constrain: enum and const are their values as compact JSON, filtered by type") {
  const Grammar e = schema(R"({"enum":["red","green",1,null,{"x":[1,2]},"gr"]})");
  for (const char* ok : {R"("red")", R"("green")", "1", "null", R"({"x":[1,2]})", R"("gr")"}) CHECK_MESSAGE(test::accepts(e, ok), ok);
  for (const char* bad : {R"("blue")", "1.0", R"({"x": [1,2]})", R"("gre")", "2"}) CHECK_MESSAGE(!test::accepts(e, bad), bad);
  const Grammar typed = schema(R"({"type":"string","enum":["a",1,"b"]})");
  CHECK(test::accepts(typed, R"("b")"));
  CHECK_FALSE(test::accepts(typed, "1"));
  const Grammar c = schema(R"({"const":"caf\u00e9 \"x\""})");
  CHECK(test::accepts(c, "\"caf\xc3\xa9 \\\"x\\\"\""));
  CHECK(refusal(R"({"type":"integer","enum":[1.5]})") == "schema at #: no JSON text satisfies it within 32 levels of recursion");
}

TEST_CASE("constrain: arrays keep their item counts") {
  const Grammar g = schema(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  CHECK_FALSE(test::accepts(g, "[1]"));
  CHECK(test::accepts(g, "[1,2]"));
  CHECK(test::accepts(g, "[ 1 , 2 , 3 ]"));
  CHECK_FALSE(test::accepts(g, "[1,2,3,4]"));
  const Grammar at_least = schema(R"({"type":"array","items":{"type":"null"},"minItems":2})");
  CHECK_FALSE(test::accepts(at_least, "[null]"));
  CHECK(test::accepts(at_least, "[null,null,null,null,null]"));
  const Grammar one = schema(R"({"type":"array","minItems":1})");
  CHECK_FALSE(test::accepts(one, "[]"));
  CHECK(test::accepts(one, R"([1,"a",{"b":[]}])"));
  const Grammar none = schema(R"({"type":"array","items":false})");
  CHECK(test::accepts(none, "[]"));
  CHECK_FALSE(test::accepts(none, "[1]"));
}

TEST_CASE("constrain: anyOf and $ref, recursion included, within the nesting bound") {
  const Grammar g = schema(R"({"anyOf":[{"type":"object","properties":{"kind":{"const":"leaf"},"v":{"type":"integer"}},
                                                          "required":["kind","v"],"additionalProperties":false},
                                         {"$ref":"#/$defs/node"}],
                               "$defs":{"node":{"type":"object","properties":{"kind":{"const":"node"},
                                                "children":{"type":"array","items":{"$ref":"#"}}},
                                                "required":["kind","children"],"additionalProperties":false}}})");
  CHECK(test::accepts(g, R"({"kind":"leaf","v":1})"));
  CHECK(test::accepts(g, R"({"kind":"node","children":[{"kind":"leaf","v":1},{"kind":"node","children":[]}]})"));
  CHECK_FALSE(test::accepts(g, R"({"kind":"node","v":1})"));
  // Each level of this tree is two $refs ("#" then node): 16 levels fit in 32, 17 do not.
  auto tree = [](int levels) {
    std::string s;
    for (int i = 0; i < levels; ++i) s += R"({"kind":"node","children":[)";
    for (int i = 0; i < levels; ++i) s += "]}";
    return s;
  };
  CHECK(test::accepts(g, tree(16)));
  CHECK_FALSE(test::accepts(g, tree(17)));
  const Grammar list = schema(R"({"$ref":"#/definitions/l","definitions":{"l":{"type":["object","null"],
                                    "properties":{"next":{"$ref":"#/definitions/l"}},"required":["next"]}}})");
  CHECK(test::accepts(list, R"({"next":{"next":null}})"));
}

TEST_CASE("constrain: json_object is any object, its nesting bounded") {
  const Grammar g = infer::constrain::json_object_grammar();
  CHECK(test::accepts(g, R"({"a":[1,{"b":null}],"c":"d","e":-1.5e3,"f":true})"));
  CHECK(test::accepts(g, "{}"));
  CHECK_FALSE(test::accepts(g, "[1]"));
  CHECK_FALSE(test::accepts(g, "\"x\""));
  CHECK_FALSE(test::accepts(g, R"({"a":1,})"));
  CHECK_FALSE(test::accepts(g, R"({"a"})"));
  // The object's value is at depth 1, each array's items one deeper: 31 arrays around a 1 fit,
  // 32 do not; 32 empty ones do.
  auto nested = [](int n, const std::string& inner) { return "{\"a\":" + std::string(n, '[') + inner + std::string(n, ']') + "}"; };
  CHECK(test::accepts(g, nested(31, "1")));
  CHECK_FALSE(test::accepts(g, nested(32, "1")));
  CHECK(test::accepts(g, nested(32, "")));
  CHECK_FALSE(test::accepts(g, nested(33, "")));
}
