// ringattn serve — the OpenAI-style HTTP endpoint of a hosted model, on rank 0, for the
// clients people already have (the openai packages, curl, LangChain, ...):
//
//   POST /v1/completions       {"prompt": "...", "max_tokens": 16, "temperature": 1, "top_p": 1,
//                               "seed": 1, "stream": false}
//   POST /v1/chat/completions  {"messages": [{"role": ..., "content": "..."}], ...the same}: the
//                               prompt is the messages' contents in order, joined by "\n" (a
//                               base model such as stories260K has no chat format of its own)
//   GET  /v1/models            the hosted model
//
// With "stream": true the tokens come as server-sent events (`data: {chunk}` per token, then
// `data: [DONE]`) the moment rank 0 chooses them; without, one JSON object at the end.
// Errors are JSON ({"error": {"message", "type", "code"}}) with an HTTP status: 400 for a bad
// request (named field, the numbers for one that does not fit), 401 without the bearer token,
// 404, 413 for a body over 1 MiB, 503 while the ring is not ready or drains. Served by
// cpp-httplib (Debian's libcpp-httplib-dev): a bounded pool of 16 connection threads, read
// and write deadlines, the body's size bounded before it is read.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "src/serve/metrics.hpp"

namespace httplib {
class Server;
}

namespace ringattn::serve {

class RingService;

class OpenAiEndpoint {
 public:
  // Binds `listen` (HOST:PORT) at once (throws NetworkError naming it) and serves on a thread
  // of its own. `api_key` empty: no token asked (the caller allows that on loopback only).
  OpenAiEndpoint(const std::string& listen, std::string api_key, RingService& service, Metrics& metrics);
  ~OpenAiEndpoint();  // stops serving; open streams end
  OpenAiEndpoint(const OpenAiEndpoint&) = delete;
  OpenAiEndpoint& operator=(const OpenAiEndpoint&) = delete;

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace ringattn::serve
