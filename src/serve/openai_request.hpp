// ringattn serve — an OpenAI-style request as the endpoint reads it (the body parsed, every
// field checked and bounded, the prompt tokenized: Asked) and the errors it answers with, in
// OpenAI's words. Shared by /v1/completions, /v1/chat/completions (openai_api.cpp) and
// /v1/responses (openai_responses.cpp, which converts its request to a chat's).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../cli/json_object.hpp"
#include "../../infer/common/json.hpp"
#include "../../infer/job/prompts.hpp"
#include "../../infer/constrain/grammar.hpp"
#include "../../infer/job/tool_calls.hpp"
#include "http_server.hpp"
#include "ringattn/ring.hpp"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace ringattn::serve {

class Refusal;
struct HostedModel;

// An answer other than 200, as OpenAI words it: `param` the request's field at fault and
// `code` OpenAI's code for it (each null when empty).
struct ApiError {
  int status;
  std::string message;
  std::string param{};
  std::string code{};
  std::string type = "invalid_request_error";
};

ApiError bad(std::string param, std::string message, std::string code = "");
ApiError server_error(int status, std::string message);
std::string error_json(const ApiError& e);
void fail(httplib::Response& res, const ApiError& e);
// Throws 401 unless the request carries `key` as its bearer token (`key` empty: none asked).
void authorize(const std::string& key, const httplib::Request& req);
// A refusal of the ring service (sessions.hpp) as an answer.
ApiError refused(const Refusal& e, bool chat);

// The endpoint's HTTP bounds (http_server.hpp).
HttpLimits api_limits();
inline constexpr auto kSilence = std::chrono::seconds(120);  // longest wait for the ring's next token
// A stream silent this long (a long prefill, a busy ring) gets an SSE comment line, which
// clients ignore: proxies keep the connection, and a client that has left is found by the
// failed write and its request cancelled before the ring spends more on it.
inline constexpr auto kHeartbeat = std::chrono::seconds(1);

struct Asked {
  std::vector<std::int32_t> prompt;  // BOS and the prompt's ids; a session's follow-up: its ids only
  int max_tokens = 16;
  infer::Sampling sampling{1.0f, 1.0f, 1};
  std::vector<std::string> stop;  // OpenAI's stop sequences, empty ones left out
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool open_session = false;   // "session": true
  std::string session;         // "session": "sess-<32 hex digits>"
  int logprobs = -1;           // -1: none; else each token's log probability and this many alternatives
  int n = 1;                   // choices: samples of the prompt sharing its prefill (seeds seed, seed + 1, ...)
  // A chat's tools: offered through its template (tools_offered), how a reply calls them
  // (the template's syntax), and tool_choice: "auto", "none" (the template is not given
  // them), "required" or a function's name (both: the reply is a call, by the grammar).
  bool tools_offered = false;
  infer::ToolSyntax tool_syntax = infer::ToolSyntax::none;
  std::string tool_choice = "auto";
  std::string tool_name;  // tool_choice {"type": "function", "function": {"name"}}
  infer::Json tools = nullptr;
  // A constrained reply: response_format's json_object or json_schema, or a forced tool
  // call's schema (then framed by the syntax's opening and closing: forced_frame).
  std::optional<infer::constrain::Grammar> grammar;
  std::optional<infer::ToolFrame> forced_frame;
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  float presence_penalty = 0, frequency_penalty = 0;
};

bool given(const infer::Json* v);  // present and not null
// A request's body as a JSON object; throws ApiError (400) saying why it is not one.
infer::Json read_body(const std::string& body);
// The body of a completion (chat false) or a chat completion, read and checked; throws ApiError.
Asked parse_request(const std::string& body, bool chat, const HostedModel& m, const RingLimits& limits);
// OpenAI's usage; `cached`: the prompt's tokens whose rows the prefix cache held (not computed).
cli::JsonObject usage_json(std::size_t prompt, std::int64_t cached, int completion);

}  // namespace ringattn::serve
