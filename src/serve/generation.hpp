// ringattn serve — text generation on a hosted model: one request as it travels from the
// HTTP endpoint to the ring thread and its tokens back, and the batch rank 0 sends the
// workers (every queued request packed into one run of infer::run_batch).
//
// The GENERATE message (peer_messages.hpp): JSON
//   {"max_tokens": N, "end": [sequence ids],
//    "prompts": [{"tokens": [ids], "temperature": T, "top_p": P, "seed": S, "max_tokens": N,
//                 "sequence": id, "keep": bool, "from": [ring position, RoPE position]}, ...]}
// "end": kept sequences every rank erases first (ended sessions); "from": a session's
// follow-up (its tokens continue kept rows); "keep": its rows stay after the batch. Checked
// on every rank against the model (ids in its vocabulary, within its trained context), the
// ring's limits and the ids it keeps, before anything is sized from it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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
  // Its place in the KV caches (SessionTable::admit, sessions.hpp).
  std::string session;                           // the session it opens or continues; empty: none
  std::int32_t sequence = -1;                    // its KV-cache sequence id
  bool keep = false;                             // its rows stay after its batch (a session's)
  std::optional<infer::Continuation> continues;  // a follow-up: where its tokens go on
  std::int64_t reserved = 0;                     // cache rows it holds ring-wide while it runs
  bool settled = false;                          // SessionTable::finish saw it
  std::atomic<bool> cancelled{false};  // the client went away: its tokens are dropped
  bool ended = false;                  // ring thread only: done or error was pushed
  bool complete = false;               // ring thread only: done was pushed (its reply is whole)
  int generated = 0;                   // ring thread only
};

// The GENERATE payload of `batch` (maybe empty), after erasing `end` on every rank.
std::string encode_batch(const std::vector<std::shared_ptr<Generation>>& batch, const std::vector<std::int32_t>& end);

struct DecodedBatch {
  std::vector<infer::Prompt> prompts;
  std::vector<std::int32_t> end;
  int max_tokens = 0;
};
// `kept`: the sequence ids this rank keeps. Throws NetworkError (protocol) naming rank 0
// and the field.
DecodedBatch decode_batch(const std::string& payload, std::int64_t vocab, std::int64_t context, std::int64_t max_tokens_total,
                          const std::set<std::int32_t>& kept);

}  // namespace ringattn::serve
