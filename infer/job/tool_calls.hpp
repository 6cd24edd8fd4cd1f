// infer — a model's tool-call syntax: how the text it generates calls the tools its chat
// template offered, recognised from the template itself, and the parser that turns a reply
// into OpenAI's tool_calls (a name and its arguments as JSON text) and the content outside.
//
//   hermes   (Qwen 2.5 / Qwen 3, Hermes): <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one block a call
//   llama3   (Llama 3.1-3.3 JSON tool calling): the whole reply {"name": ..., "parameters": {...}}
//            (or "arguments"), optionally after <|python_tag|>; several separated by ";"
//   mistral  (Mistral v3 tokenizers): [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
//
// A reply that does not parse as its syntax is content: a model that meant to call a tool
// and wrote something else gets its text back, never a made-up call.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "../common/json.hpp"

namespace infer {

enum class ToolSyntax { none, hermes, llama3, mistral };
const char* to_string(ToolSyntax s);

// The syntax a chat template teaches the model (from the markers it writes); none when it
// offers no tools.
ToolSyntax tool_syntax_of(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI's function.arguments
};

struct ParsedReply {
  std::string content;          // the text outside the calls (trimmed; empty if none)
  std::vector<ToolCall> calls;  // in order; empty: the reply calls no tool
};

// `text`: the whole reply. At most 64 calls; arguments must be JSON objects.
ParsedReply parse_tool_calls(ToolSyntax s, std::string_view text);

// A stream holds the text back while it could still be the start of a call (the marker's
// prefix, or for llama3 a reply that begins with '{'): what a client sees as content is never
// part of a call.
bool may_be_tool_call(ToolSyntax s, std::string_view text_so_far);

// How a call is written in syntax `s` (not none): the text before its JSON, after it, the
// key of the arguments, and whether the JSON is an array of calls (Mistral's).
struct ToolFrame {
  std::string open, close;
  std::string arguments_key;
  bool array = false;
};
ToolFrame tool_frame(ToolSyntax s);

// The JSON schema of the JSON a forced call writes in syntax `s`: {"name": one of the tools'
// names (or `only`), arguments: that tool's "parameters" schema} (Mistral: an array of one),
// for the constrained sampler (infer/constrain). `tools`: OpenAI's [{"type": "function",
// "function": {"name", "parameters"}}], checked by the caller.
Json tool_call_schema(ToolSyntax s, const Json& tools, const std::string& only = {});

}  // namespace infer
