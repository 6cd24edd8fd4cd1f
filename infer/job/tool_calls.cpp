// infer — tool-call syntaxes (tool_calls.hpp).
#include "tool_calls.hpp"

#include <algorithm>
#include <optional>

namespace infer {

namespace {

constexpr std::size_t kMaxCalls = 64;

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// {"name": string, <args_key>: object} (or "arguments" for llama3's "parameters"), as a call.
std::optional<ToolCall> call_of(const Json& j) {
  if (!j.is_object()) return std::nullopt;
  const std::string* name = json_string(j, "name");
  const Json* args = json_field(j, "arguments");
  if (!args) args = json_field(j, "parameters");
  if (!name || name->empty() || !args || !args->is_object()) return std::nullopt;
  return ToolCall{*name, args->dump()};
}

std::optional<Json> parse(std::string_view text) {
  try {
    return parse_json(std::string(text));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

ParsedReply hermes(std::string_view text) {
  ParsedReply r;
  constexpr std::string_view open = "<tool_call>", close = "</tool_call>";
  std::string content;
  std::size_t at = 0;
  for (;;) {
    const std::size_t b = text.find(open, at);
    if (b == std::string_view::npos) break;
    const std::size_t e = text.find(close, b + open.size());
    if (e == std::string_view::npos) return {std::string(trim(text)), {}};  // an unclosed block: all text
    const std::optional<Json> j = parse(trim(text.substr(b + open.size(), e - b - open.size())));
    const std::optional<ToolCall> c = j ? call_of(*j) : std::nullopt;
    if (!c || r.calls.size() == kMaxCalls) return {std::string(trim(text)), {}};
    content += text.substr(at, b - at);
    r.calls.push_back(*c);
    at = e + close.size();
  }
  content += text.substr(at);
  r.content = std::string(trim(content));
  return r;
}

ParsedReply llama3(std::string_view text) {
  std::string_view t = trim(text);
  if (t.rfind("<|python_tag|>", 0) == 0) t = trim(t.substr(14));
  ParsedReply r;
  // One call, or several separated by ';' (each a whole JSON object).
  std::size_t at = 0;
  while (at < t.size()) {
    std::size_t end = t.find(';', at);
    std::optional<Json> j;
    // A ';' may sit inside a string of the arguments: grow the piece until it parses.
    while (!(j = parse(trim(t.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at)))) && end != std::string_view::npos)
      end = t.find(';', end + 1);
    const std::optional<ToolCall> c = j ? call_of(*j) : std::nullopt;
    if (!c || r.calls.size() == kMaxCalls) return {std::string(trim(text)), {}};
    r.calls.push_back(*c);
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  if (r.calls.empty()) r.content = std::string(trim(text));
  return r;
}

ParsedReply mistral(std::string_view text) {
  const std::string_view t = trim(text);
  constexpr std::string_view marker = "[TOOL_CALLS]";
  if (t.rfind(marker, 0) != 0) return {std::string(t), {}};
  const std::optional<Json> j = parse(trim(t.substr(marker.size())));
  if (!j || !j->is_array() || j->empty() || j->size() > kMaxCalls) return {std::string(t), {}};
  ParsedReply r;
  for (const Json& x : *j) {
    const std::optional<ToolCall> c = call_of(x);
    if (!c) return {std::string(t), {}};
    r.calls.push_back(*c);
  }
  return r;
}

bool prefix_of(std::string_view text, std::string_view marker) {
  const std::string_view t = trim(text);
  return t.size() < marker.size() ? marker.rfind(t, 0) == 0 : t.rfind(marker, 0) == 0;
}

}  // namespace

const char* to_string(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::none: return "none";
    case ToolSyntax::hermes: return "hermes";
    case ToolSyntax::llama3: return "llama3";
    case ToolSyntax::mistral: return "mistral";
  }
  return "none";
}

ToolSyntax tool_syntax_of(std::string_view src) {
  if (src.find("<tool_call>") != std::string_view::npos) return ToolSyntax::hermes;
  if (src.find("[TOOL_CALLS]") != std::string_view::npos) return ToolSyntax::mistral;
  if (src.find("<|python_tag|>") != std::string_view::npos || src.find("\"parameters\": dictionary of argument name") != std::string_view::npos ||
      (src.find("<|start_header_id|>") != std::string_view::npos && src.find("tools") != std::string_view::npos))
    return ToolSyntax::llama3;
  return ToolSyntax::none;
}

ParsedReply parse_tool_calls(ToolSyntax s, std::string_view text) {
  switch (s) {
    case ToolSyntax::hermes: return hermes(text);
    case ToolSyntax::llama3: return llama3(text);
    case ToolSyntax::mistral: return mistral(text);
    case ToolSyntax::none: break;
  }
  return {std::string(trim(text)), {}};
}

bool may_be_tool_call(ToolSyntax s, std::string_view text) {
  switch (s) {
    case ToolSyntax::hermes: return prefix_of(text, "<tool_call>");
    case ToolSyntax::mistral: return prefix_of(text, "[TOOL_CALLS]");
    case ToolSyntax::llama3: return trim(text).empty() || trim(text).front() == '{' || prefix_of(text, "<|python_tag|>");
    case ToolSyntax::none: break;
  }
  return false;
}

ToolFrame tool_frame(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::hermes: return {"<tool_call>\n", "\n</tool_call>", "arguments", false};
    case ToolSyntax::llama3: return {"", "", "parameters", false};
    case ToolSyntax::mistral: return {"[TOOL_CALLS]", "", "arguments", true};
    case ToolSyntax::none: break;
  }
  return {};
}

Json tool_call_schema(ToolSyntax s, const Json& tools, const std::string& only) {
  const ToolFrame f = tool_frame(s);
  Json calls = Json::array();
  for (const Json& t : tools) {
    const Json& fn = t.at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (!only.empty() && name != only) continue;
    const Json* params = json_field(fn, "parameters");
    Json call = {{"type", "object"},
                 {"properties", {{"name", {{"const", name}}}, {f.arguments_key, params && !params->is_null() ? *params : Json{{"type", "object"}}}}},
                 {"required", {"name", f.arguments_key}},
                 {"additionalProperties", false}};
    calls.push_back(std::move(call));
  }
  Json one = calls.size() == 1 ? calls[0] : Json{{"anyOf", calls}};
  if (!f.array) return one;
  return {{"type", "array"}, {"items", one}, {"minItems", 1}, {"maxItems", 1}};
}

}  // namespace infer
