// Tool-call syntaxes (infer/job/tool_calls.hpp): recognised from real templates' markers,
// replies parsed into OpenAI's calls (name, arguments as a JSON object's text), text that is
// not a call left as content, a stream's hold while text could still become one, and the
// frame a forced call is written in parsing back to that call.
#include <doctest/doctest.h>

#include "job/tool_calls.hpp"

namespace infer {

TEST_CASE("tool calls: the syntax of a template, from its markers") {
  CHECK(tool_syntax_of("{%- if tools %}<tools>{{ tools }}</tools> ... <tool_call>\n{\"name\": ...}</tool_call>") == ToolSyntax::hermes);
  CHECK(tool_syntax_of("{{- '[AVAILABLE_TOOLS]' }} ... {{- '[TOOL_CALLS]' }}") == ToolSyntax::mistral);
  CHECK(tool_syntax_of("<|start_header_id|>ipython<|end_header_id|> {%- if tools %} <|python_tag|>") == ToolSyntax::llama3);
  CHECK(tool_syntax_of("{% for m in messages %}{{ m.content }}{% endfor %}") == ToolSyntax::none);
}

TEST_CASE("tool calls: hermes (Qwen) blocks, several, with text around; broken ones are content") {
  const ParsedReply r = parse_tool_calls(ToolSyntax::hermes,
                                         "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                                         "<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(parse_json(r.calls[0].arguments) == parse_json("{\"city\": \"Paris\"}"));
  CHECK(r.calls[1].name == "time");
  CHECK(r.content == "Let me look.");
  CHECK(parse_tool_calls(ToolSyntax::hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>").calls.empty());
  CHECK(parse_tool_calls(ToolSyntax::hermes, "<tool_call>\n{\"name\": \"f\"").content == "<tool_call>\n{\"name\": \"f\"");
  CHECK(parse_tool_calls(ToolSyntax::hermes, "Paris is sunny.").content == "Paris is sunny.");
}

TEST_CASE("tool calls: llama3 JSON (parameters or arguments), python_tag, several by ';' even inside strings") {
  ParsedReply r = parse_tool_calls(ToolSyntax::llama3, " {\"name\": \"f\", \"parameters\": {\"q\": \"a;b\"}}");
  REQUIRE(r.calls.size() == 1);
  CHECK(parse_json(r.calls[0].arguments) == parse_json("{\"q\": \"a;b\"}"));
  r = parse_tool_calls(ToolSyntax::llama3, "<|python_tag|>{\"name\": \"f\", \"arguments\": {}}; {\"name\": \"g\", \"parameters\": {\"x\": 1}}");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[1].name == "g");
  CHECK(parse_tool_calls(ToolSyntax::llama3, "{\"answer\": 42}").calls.empty());
  CHECK(parse_tool_calls(ToolSyntax::llama3, "The answer is 42.").content == "The answer is 42.");
}

TEST_CASE("tool calls: mistral's [TOOL_CALLS] array") {
  const ParsedReply r = parse_tool_calls(ToolSyntax::mistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}]");
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].name == "f");
  CHECK(parse_tool_calls(ToolSyntax::mistral, "[TOOL_CALLS]not json").calls.empty());
}

TEST_CASE("tool calls: a stream holds text while it could be a call, and only then") {
  CHECK(may_be_tool_call(ToolSyntax::hermes, "<tool"));
  CHECK(may_be_tool_call(ToolSyntax::hermes, "\n<tool_call>\n{\"na"));
  CHECK(!may_be_tool_call(ToolSyntax::hermes, "Hello"));
  CHECK(may_be_tool_call(ToolSyntax::llama3, " {"));
  CHECK(!may_be_tool_call(ToolSyntax::llama3, "Sure"));
  CHECK(may_be_tool_call(ToolSyntax::mistral, "[TOOL"));
  CHECK(!may_be_tool_call(ToolSyntax::none, "<tool_call>"));
}

TEST_CASE("tool calls: a forced call's frame around its JSON parses back to that call; the call's schema names the tool") {
  const Json tools = parse_json(R"([{"type": "function", "function": {"name": "get \"weather\"", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}, {"type": "function", "function": {"name": "time"}}])");
  for (const ToolSyntax s : {ToolSyntax::hermes, ToolSyntax::llama3, ToolSyntax::mistral}) {
    CAPTURE(to_string(s));
    const ToolFrame f = tool_frame(s);
    Json call = {{"name", "get \"weather\""}, {f.arguments_key, {{"city", "Oslo"}}}};
    if (f.array) call = Json::array({call});
    const ParsedReply r = parse_tool_calls(s, f.open + call.dump() + f.close);
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].name == "get \"weather\"");
    CHECK(parse_json(r.calls[0].arguments) == parse_json("{\"city\": \"Oslo\"}"));
    const Json all = tool_call_schema(s, tools);
    const Json& any = f.array ? all.at("items") : all;
    CHECK(any.at("anyOf").size() == 2);
    const Json named = tool_call_schema(s, tools, "time");
    const Json& one = f.array ? named.at("items") : named;
    CHECK(one.at("properties").at("name").at("const") == "time");
    CHECK(one.at("properties").at(f.arguments_key) == parse_json(R"({"type": "object"})"));
  }
}

}  // namespace infer
