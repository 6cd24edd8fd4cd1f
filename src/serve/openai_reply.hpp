// ringattn serve — how one reply of the OpenAI-style endpoint is written: whole (one JSON
// object) or streamed (server-sent events), in the shape of the endpoint it answers: a
// completion's or a chat completion's (openai_api.cpp), or a response's (/v1/responses,
// openai_responses.cpp). The endpoint's loops (the ring's tokens, stop sequences,
// heartbeats, a client gone) are the same for all; only the shape differs.
#pragma once

#include <cstdint>
#include <string>

#include "../cli/json_object.hpp"

namespace ringattn::serve {

struct Usage {
  std::int64_t prompt = 0, cached = 0, completion = 0;
};

inline std::string sse(const std::string& data) { return "data: " + data + "\n\n"; }

class ReplyFormat {
 public:
  virtual ~ReplyFormat() = default;
  // The whole reply: its text, why it ended ("stop", "length"), usage, and its tokens' log
  // probabilities (none: null).
  virtual std::string whole(const std::string& text, const std::string& finish, const Usage& usage, const cli::JsonObject* logprobs) = 0;
  // A stream: what goes before the first text, each piece of text (with its tokens' log
  // probabilities), and what ends it.
  virtual std::string opening() { return {}; }
  virtual std::string delta(const std::string& text, const cli::JsonObject* logprobs) = 0;
  virtual std::string closing(const std::string& finish, const Usage& usage) = 0;
};

}  // namespace ringattn::serve
