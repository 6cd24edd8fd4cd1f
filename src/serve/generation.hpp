// ringattn serve — text generation on a hosted model: one request as it travels from the
// HTTP endpoint to the ring thread and its tokens back, and the batch rank 0 sends the
// workers (every queued request packed into one run of infer::run_batch).
//
// The GENERATE message (peer_messages.hpp): JSON
//   {"max_tokens": N, "prompts": [{"tokens": [ids], "temperature": T, "top_p": P, "seed": S}, ...]}
// checked on the worker against the model (ids in its vocabulary, every prompt and N
// within its trained context) and the ring's limits before anything is sized from it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "infer/prompts.hpp"

namespace ringattn::serve {

// What the ring thread tells a request's connection, in order.
struct TokenEvent {
  enum class Kind { token, done, error } kind = Kind::token;
  std::int32_t token = 0;
  std::string piece;          // token: its text after the previous one
  std::string finish_reason;  // done: "stop" (BOS or EOS) or "length" (max_tokens)
  std::string error;          // error: what failed, where
  int status = 500;           // error: the HTTP status it maps to
};

inline TokenEvent token_event(std::int32_t token, std::string piece) {
  TokenEvent e;
  e.token = token;
  e.piece = std::move(piece);
  return e;
}
inline TokenEvent done_event(std::string finish_reason) {
  TokenEvent e;
  e.kind = TokenEvent::Kind::done;
  e.finish_reason = std::move(finish_reason);
  return e;
}
inline TokenEvent error_event(std::string error, int status) {
  TokenEvent e;
  e.kind = TokenEvent::Kind::error;
  e.error = std::move(error);
  e.status = status;
  return e;
}

// A thread-safe queue of one request's events (ring thread -> HTTP thread).
class TokenStream {
 public:
  void push(TokenEvent e);
  // The next event, or nullopt after `wait` without one.
  std::optional<TokenEvent> next(std::chrono::milliseconds wait);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
};

struct Generation {
  std::uint64_t id = 0;
  std::vector<std::int32_t> prompt;  // BOS, then the prompt's ids
  int max_tokens = 16;
  infer::Sampling sampling;
  std::chrono::steady_clock::time_point queued_at = std::chrono::steady_clock::now();
  TokenStream stream;
  std::atomic<bool> cancelled{false};  // the client went away: its tokens are dropped
  bool ended = false;                  // ring thread only: done or error was pushed
  int generated = 0;                   // ring thread only
};

// The GENERATE payload of `batch`, which the ring runs for max_tokens steps.
std::string encode_batch(const std::vector<std::shared_ptr<Generation>>& batch, int max_tokens);

struct DecodedBatch {
  std::vector<infer::Prompt> prompts;
  int max_tokens = 0;
};
// Throws NetworkError (protocol) naming rank 0 and the field.
DecodedBatch decode_batch(const std::string& payload, std::int64_t vocab, std::int64_t context, std::int64_t max_tokens_total);

}  // namespace ringattn::serve
