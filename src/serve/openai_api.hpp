// ringattn serve — the OpenAI-style HTTP endpoint of a hosted model, on rank 0, for the
// clients people already have (the openai packages, curl, LangChain, ...):
//
//   POST /v1/completions       {"model": id, "prompt": "...", "max_tokens": 16 (or
//                               "max_completion_tokens"), "temperature": 1, "top_p": 1,
//                               "seed": 1, "stop": "..." or ["...", ...], "stream": false,
//                               "stream_options": {"include_usage": true}}
//   POST /v1/chat/completions  {"messages": [{"role": ..., "content": "..."}], ...the same}: the
//                               prompt is the messages' contents in order, joined by "\n" (a
//                               base model such as stories260K has no chat format of its own)
//   GET  /v1/models, /v1/models/ID   the hosted model
//   POST /v1/responses         OpenAI's Responses API, by conversion to a chat
//                               (openai_responses.hpp); GET and DELETE /v1/responses/ID: a
//                               stored one (response_store.hpp)
//   GET  /, /v1/ring           a page for people (without the key: it holds no data) and the
//                               ring's live state it draws (web_page.hpp, ring_view.hpp)
//
// As OpenAI answers: a `model` other than the hosted one is 404 model_not_found (none given:
// the hosted one answers); `stop` ends the text before the first stop sequence, which is
// never sent, not even in part; with "stream": true the tokens come as server-sent events
// (`data: {chunk}`, then `data: [DONE]`) the moment rank 0 chooses them, usage only in one
// last chunk with no choices when include_usage asks for it; without, one JSON object with
// usage. Errors are {"error": {"message", "type", "param", "code"}} (param: the field at
// fault; code: OpenAI's string, e.g. invalid_api_key, model_not_found,
// context_length_exceeded, unsupported_parameter for a parameter not implemented given with
// a value other than its default (openai_params.hpp), or null) with an HTTP status: 400 for a bad request (named
// field, the numbers for one that does not fit), 401 without the key or with a wrong one,
// 404, 413 for a body over 1 MiB, 503 while the ring is not ready or drains; every answer
// is counted in ringattn_api_requests_total{status}. Served by the daemon's HTTP server
// (http_server.hpp: cpp-httplib with bounds on the head, the body however framed, one
// deadline per request, connections per client address); the key is checked before the body
// is read.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "metrics.hpp"

namespace ringattn::serve {

class RingService;
class HttpServer;
class ResponseStore;

class OpenAiEndpoint {
 public:
  // Binds `listen` (HOST:PORT) at once (throws NetworkError naming it) and serves on a thread
  // of its own. `api_key` empty: no token asked (the caller allows that on loopback only).
  OpenAiEndpoint(const std::string& listen, std::string api_key, RingService& service, Metrics& metrics);
  ~OpenAiEndpoint();  // stops serving; open streams end
  OpenAiEndpoint(const OpenAiEndpoint&) = delete;
  OpenAiEndpoint& operator=(const OpenAiEndpoint&) = delete;

 private:
  std::unique_ptr<ResponseStore> responses_;  // before server_: its handlers use it till it stops
  std::unique_ptr<HttpServer> server_;
};

// OpenAI's `stop` on a reply's text as its tokens come: the text ends before the first
// place any stop sequence begins, matched across token boundaries. Text that could still
// be the start of a stop sequence is held back until a later piece decides, so no part of
// one is ever returned. (Empty sequences never match: OpenAI ignores them.)
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // A token's piece in; out: the text now known to come before any stop sequence.
  std::string feed(std::string_view piece);
  bool matched() const { return matched_; }
  // The text held back, once the reply ended without a match.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace ringattn::serve
