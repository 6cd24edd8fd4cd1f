// ringattn serve — how one reply of the OpenAI-style endpoint is written: whole (one JSON
// object) or streamed (server-sent events), in the shape of the endpoint it answers: a
// completion's or a chat completion's (openai_api.cpp), or a response's (/v1/responses,
// openai_responses.cpp). The endpoint's loops (the ring's tokens, stop sequences,
// heartbeats, a client gone) are the same for all; only the shape differs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../cli/json_object.hpp"
#include "../../infer/job/tool_calls.hpp"

namespace ringattn::serve {

struct Usage {
  std::int64_t prompt = 0, cached = 0, completion = 0;
};

inline std::string sse(const std::string& data) { return "data: " + data + "\n\n"; }

// One choice of a whole reply (OpenAI's n > 1: one a sample).
struct Choice {
  std::string text, finish;
  std::optional<cli::JsonObject> logprobs;  // the tokens' log probabilities, when asked
};

// A reply that offered tools (`syntax` not none) and ended on its own (not at the length
// limit): the tool calls its text makes, if any.
inline std::optional<infer::ParsedReply> calls_in(infer::ToolSyntax syntax, const std::string& text, const std::string& finish) {
  if (syntax == infer::ToolSyntax::none || finish == "length") return std::nullopt;
  infer::ParsedReply p = infer::parse_tool_calls(syntax, text);
  if (p.calls.empty()) return std::nullopt;
  return p;
}

// A streamed reply's text with tools offered: held while it could still be a call, then
// passed on as it comes once it cannot (what a client sees as content is never a call's).
struct HeldText {
  std::string held;
  bool passing = false;
  // What goes out now of `text` (empty while held).
  std::string pass(infer::ToolSyntax syntax, const std::string& text) {
    if (syntax == infer::ToolSyntax::none || passing) return text;
    held += text;
    if (infer::may_be_tool_call(syntax, held)) return {};
    passing = true;
    return std::exchange(held, {});
  }
};

class ReplyFormat {
 public:
  virtual ~ReplyFormat() = default;
  // The whole reply: every choice (its text, why it ended: "stop", "length"), and usage.
  virtual std::string whole(const std::vector<Choice>& choices, const Usage& usage) = 0;
  // A stream: what goes before the first text, each piece of a choice's text (with its
  // tokens' log probabilities), a choice's end, and what ends the stream once all ended.
  virtual std::string opening() { return {}; }
  virtual std::string delta(int index, const std::string& text, const cli::JsonObject* logprobs) = 0;
  virtual std::string choice_end(int index, const std::string& finish) = 0;
  virtual std::string closing(const Usage& usage) = 0;
};

}  // namespace ringattn::serve
