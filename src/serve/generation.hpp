// ringattn serve — text generation on a hosted model: one request as it travels from the
// HTTP endpoint to the ring thread and its tokens back, and the batch rank 0 sends the
// workers (every queued request packed into one run of infer::run_batch).
//
// The GENERATE message (peer_messages.hpp), little-endian:
//   max_tokens u32 | ends u32 | ends x sequence i32 | cuts u32 | cuts x (sequence i32 |
//   ring position i64) | prompts u32 | per prompt:
//   tokens u32 | sequence i32 | max_tokens u32 | keep u8 | continues u8 | temperature f32 |
//   top_p f32 | seed u64 | ring position i64 | RoPE position i64 (0 and 0 unless continues) |
//   copy_of i32 (-1, or an earlier prompt this one is a sample of) | tokens x id i32.
// "ends": kept sequences every rank erases first (ended sessions); "cuts": kept sequences
// every rank shortens first, erasing their rows at or past the ring position (a cached
// prefix a new prompt shares only in part); "continues": a session's
// follow-up (its tokens continue kept rows from those positions); "keep": its rows stay
// after the batch. Every count is bounded by the bytes left before anything is sized from
// it, and the batch is checked on every rank against the model (ids in its vocabulary,
// within its trained context), the ring's limits and the ids it keeps — on rank 0 too,
// which runs the batch it built rather than reading its own message back.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "../../infer/job/logprobs.hpp"
#include "../../infer/job/prompts.hpp"
#include "../../infer/job/text_tokenizer.hpp"
#include "constraint.hpp"

namespace ringattn::serve {

// What the ring thread tells a request's connection, in order.
struct TokenEvent {
  enum class Kind { token, done, error } kind = Kind::token;
  std::int32_t token = 0;
  int index = 0;              // the choice it belongs to (OpenAI's n > 1: the sample's)
  std::string piece;          // token: the text it completes; done: the text held back till the end
  std::optional<infer::TokenLogprobs> logprobs;  // token: when its request asked (Generation::top_logprobs)
  std::string finish_reason;  // done: "stop" (an end token) or "length" (max_tokens)
  std::string error;          // error: what failed, where
  int status = 500;           // error: the HTTP status it maps to
};

inline TokenEvent token_event(std::int32_t token, std::string piece) {
  TokenEvent e;
  e.token = token;
  e.piece = std::move(piece);
  return e;
}
inline TokenEvent done_event(std::string finish_reason, std::string rest = {}) {
  TokenEvent e;
  e.kind = TokenEvent::Kind::done;
  e.finish_reason = std::move(finish_reason);
  e.piece = std::move(rest);
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
  int top_logprobs = -1;  // -1: no log probabilities; else each token's, with this many alternatives (0-20)
  // How its logits are shaped before each token is chosen (shape_logits): OpenAI's
  // logit_bias (added), presence and frequency penalties (over the tokens it generated).
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  float presence_penalty = 0, frequency_penalty = 0;
  std::unique_ptr<Constraint> constraint;  // structured output or a forced tool call (constraint.hpp)
  // OpenAI's n > 1: the other samples of this request (taken into its first round with it),
  // and, in a sample, the request it copies (in that first round) and its choice index.
  std::vector<std::shared_ptr<Generation>> samples;
  const Generation* copy_of = nullptr;
  int index = 0;
  std::chrono::steady_clock::time_point queued_at = std::chrono::steady_clock::now();
  std::shared_ptr<TokenStream> stream = std::make_shared<TokenStream>();  // a request's samples share one (events by index)
  // Its place in the KV caches (SessionTable::admit, sessions.hpp).
  std::string session;                           // the session it opens or continues; empty: none
  std::int32_t sequence = -1;                    // its KV-cache sequence id
  bool keep = false;                             // its rows stay after its batch (a session's)
  std::optional<infer::Continuation> continues;  // a follow-up: where its tokens go on
  std::optional<std::int64_t> cut_from;          // a cached prefix shared in part: its rows from here go first
  std::int64_t cached = 0;                       // prompt tokens whose rows it found cached (not computed)
  bool missed = false;                           // its admission looked the prefix cache up and found nothing
  std::int64_t reserved = 0;                     // cache rows it holds ring-wide while it runs
  bool settled = false;                          // SessionTable::finish saw it
  std::atomic<bool> cancelled{false};  // the client went away: its tokens are dropped
  std::atomic<bool> stopped{false};    // the endpoint found a stop sequence: a whole reply, ended early
  // Continuous batching (ring thread only): a reply runs in rounds of the ring, pausing
  // at a step boundary whenever newcomers wait and going on in the next round with them.
  std::vector<std::int32_t> feed;           // what its next round feeds: the prompt, then the token chosen last
  std::vector<std::int32_t> rest;           // a prompt fed in chunks (replies were streaming): what later rounds feed
  std::unique_ptr<infer::TextStream> text;  // its text so far (held-back bytes across rounds)
  std::chrono::steady_clock::time_point last_token_at;
  std::vector<std::int32_t> chosen;         // every token chosen for it (the last one is never fed)
  std::map<std::int32_t, int> counts;       // how often each token was chosen (the penalties')
  bool ran = false;                    // it has rows on every rank (a round ran it, or its prefix was cached)
  bool ended = false;                  // ring thread only: done or error was pushed
  bool complete = false;               // ring thread only: done was pushed (its reply is whole)
  bool end_token = false;              // ring thread only: it chose an end token (not fed, not in its history)
  int generated = 0;                   // ring thread only
};

// Whether g's logits need shaping, and the shaping: bias, then penalties (OpenAI's:
// logit -= count x frequency_penalty + (count > 0) x presence_penalty).
bool shapes_logits(const Generation& g);
void shape_logits(const Generation& g, std::span<float> logits);

// A GENERATE batch, as every rank runs it.
struct Cut {
  std::int32_t sequence = 0;
  std::int64_t from = 0;  // ring position: this row and every later one of the sequence go
};

struct GenerateBatch {
  std::vector<infer::Prompt> prompts;
  std::vector<std::int32_t> end;  // sequences erased first
  std::vector<Cut> cuts;          // then sequences shortened
  int max_tokens = 0;             // the most any prompt generates
};

// Rank 0: the round of `running` (maybe empty) after erasing `end` on every rank. Every
// prompt is fed its `feed` and kept (a reply that pauses goes on from its rows; the rows of
// one that ends go with the next round's `end`, unless a session keeps them).
GenerateBatch make_batch(const std::vector<std::shared_ptr<Generation>>& running, const std::vector<std::int32_t>& end);
// A worker, as the frame arrives (decode_generate): `b` fits the model (vocab ids, context positions), the ring (at most
// max_rows tokens) and the ids this rank keeps (`kept`). Throws NetworkError (protocol,
// attributed to rank 0, which built it) naming the field.
void check_batch(const GenerateBatch& b, std::int64_t vocab, std::int64_t context, std::int64_t max_rows,
                 const std::set<std::int32_t>& kept);
std::vector<std::byte> encode_generate(const GenerateBatch& b);
// A worker: the GENERATE payload read (never past its end) and checked as check_batch does.
GenerateBatch decode_generate(std::span<const std::byte> payload, std::int64_t vocab, std::int64_t context,
                              std::int64_t max_rows, const std::set<std::int32_t>& kept);

// The DONE that ends a round carries the sequences every rank erases at once (replies that
// ended in it, sessions that ended meanwhile): count u32 | count x sequence i32. A worker
// reads it never past its end, and refuses an id it does not keep or names twice.
std::vector<std::byte> encode_erasures(const std::vector<std::int32_t>& sequences);
std::vector<std::int32_t> decode_erasures(std::span<const std::byte> payload, const std::set<std::int32_t>& kept);

}  // namespace ringattn::serve
