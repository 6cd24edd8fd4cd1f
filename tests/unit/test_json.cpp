// The one strict JSON reader (infer/common/json.hpp) that every program and the model runtime use
// on untrusted input: RFC 8259 strictly, nesting bounded before it is read, a repeated key
// refused, integers exact.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "infer/common/json.hpp"

namespace {

using infer::Json;
using infer::parse_json;

TEST_CASE("json: nlohmann's tree, fields in the order written, typed lookups") {
  const Json j = parse_json(R"( {"b": [1, 2.5, "x", true, null], "a": {"k": -3}} )");
  REQUIRE(j.is_object());
  CHECK(j.begin().key() == "b");
  CHECK(j["b"][1].get<double>() == 2.5);
  REQUIRE(infer::json_field(j, "a") != nullptr);
  CHECK(infer::json_number(*infer::json_field(j, "a"), "k") == -3.0);
  CHECK(infer::json_string(j, "b") == nullptr);       // there, but not a string
  CHECK(!infer::json_number(j, "nothing").has_value());
  CHECK(infer::json_field(j["b"], "b") == nullptr);   // not an object
}

TEST_CASE("json: strict RFC 8259, the first error's offset named") {
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "{'a':1}", "[1] x", "NaN", "[Infinity]", "01", "[1e]",
                          "\"\\x\"", "{\"a\" 1}", "/* */ 1"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_json(bad), doctest::Contains("invalid JSON"));
  }
  CHECK_THROWS_WITH(parse_json("[1, 2,, 3]"), doctest::Contains("at offset 6"));
  CHECK_THROWS_WITH(parse_json("\"\xff\""), doctest::Contains("invalid JSON"));            // not UTF-8
  CHECK_THROWS_WITH(parse_json(R"("\ud800")"), doctest::Contains("invalid JSON"));        // a lone surrogate
  CHECK(parse_json(R"("\u00e9\ud83d\udca5")").get<std::string>() == "\xc3\xa9\xf0\x9f\x92\xa5");
  CHECK(parse_json(" \n 7 \t").get<int>() == 7);
  CHECK_THROWS_WITH(parse_json("[1e400]"), doctest::Contains("invalid JSON: number overflow"));  // as std::runtime_error
}

TEST_CASE("json: nesting is bounded as it opens, before anything deeper is read") {
  CHECK_THROWS_WITH(parse_json(std::string(50000, '[')), doctest::Contains("nested deeper than 64 levels"));
  CHECK_THROWS_WITH(parse_json(std::string(65, '[') + std::string(65, ']')), doctest::Contains("at offset 64: nested deeper than 64"));
  CHECK(parse_json(std::string(64, '[') + std::string(64, ']')).is_array());  // 64 levels: fine
  std::string objects;
  for (int i = 0; i < 100; ++i) objects += "{\"a\":";
  CHECK_THROWS_WITH(parse_json(objects + "1" + std::string(100, '}')), doctest::Contains("nested deeper than 64"));
  // Brackets inside strings are text, not depth.
  CHECK(parse_json("[\"" + std::string(1000, '[') + "\"]").is_array());
}

TEST_CASE("json: a repeated key is refused at any depth (no reader sees another value than the writer meant)") {
  CHECK_THROWS_WITH(parse_json(R"({"prompt": "a", "prompt": "b"})"), doctest::Contains("the key \"prompt\" appears twice"));
  CHECK_THROWS_WITH(parse_json(R"([{"x": {"k": 1, "k": 2}}])"), doctest::Contains("\"k\" appears twice"));
  CHECK(parse_json(R"([{"k": 1}, {"k": 2}])").size() == 2);  // the same key in two objects is fine
  CHECK(parse_json(R"({"a": {"a": 1}})").is_object());
}

TEST_CASE("json: integers exact, never through a double") {
  CHECK(infer::json_int(parse_json("9007199254740993"), "n", 0, INT64_MAX) == 9007199254740993);  // 2^53 + 1
  CHECK(infer::json_int(parse_json("-5"), "n", -10, 10) == -5);
  CHECK(infer::json_int(parse_json("9223372036854775807"), "n", 0, INT64_MAX) == INT64_MAX);
  for (const char* bad : {"1.0", "1e3", "\"1\"", "true", "null", "11", "-11", "18446744073709551615"}) {
    INFO(bad);
    CHECK_THROWS_WITH(infer::json_int(parse_json(bad), "the id", -10, 10), doctest::Contains("the id must be an integer in [-10, 10]"));
  }
}

}  // namespace
