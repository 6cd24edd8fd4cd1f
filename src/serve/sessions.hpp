// ringattn serve — sessions on a hosted model: a conversation whose KV rows stay on every
// rank between its requests, so that a follow-up appends only its new tokens (their
// queries go around the ring past the stationary history, as in decode: no re-prefill).
//
// Rank 0 keeps the table (SessionTable): per session its KV-cache sequence id, where its
// next token goes (ring and RoPE positions), the token chosen last and not yet fed (a
// reply cut at max_tokens: it opens the next message), and its rows. Every rank keeps the
// rows themselves (KeptRows: one KVCache per layer, and the ids it keeps). A session ends
// when its client closes it (DELETE /v1/sessions/ID), after `session_ttl` idle seconds,
// with a request on it that failed or whose client left, and — all of them — when the ring
// re-forms (the caches are one ring's). An ended session's rows are erased on every rank
// with the next job, which rank 0 sends at once (a job of erasures only, if need be).
//
// The prefix cache. A reply that ends whole without a session leaves its rows where they
// are, as an entry of the same table: the tokens they hold (its prompt and its reply, the
// last chosen token not fed). A new prompt that starts with some of an entry's tokens takes
// the entry — its rows past the shared part are cut on every rank (GENERATE's cuts) — and
// only its new tokens are computed, their queries around the ring past the stationary
// rows, as a session's follow-up (pass-Q). The cost model (plan::prefix_pays, src/plan/cost_model.hpp) says when that
// beats prefilling the whole prompt afresh over the ring; at least the prompt's last token
// is always computed (its logits choose the first token). Entries are evicted least
// recently used first, before idle sessions (pinned: evicted last), and never keep a
// request out. An entry serves one request at a time (it leaves the table while that runs).
//
// Memory. The ring holds at most `capacity` cache rows (tokens) at once, counted
// ring-wide: each request reserves its history, its prompt and max_tokens while it runs,
// each idle session its history. A request that could never fit is refused (413) with
// both numbers; one that does not fit beside the others now first ends idle sessions, least
// recently used first (so that idle sessions never keep a request out), and is refused
// (503) with the numbers only if requests in flight hold the rest. Session ids are 128
// random bits: a session is reachable only by whoever was told its id. Rows spread over the ranks by the prefill's balance and decode_store_rank's
// round robin; a short prompt lies whole on one rank.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include <ringattn/kv_cache.hpp>

#include "../../infer/job/job.hpp"
#include "../../infer/job/prompts.hpp"
#include "generation.hpp"
#include "service_events.hpp"

namespace ringattn::serve {

// A request refused before it starts, with the HTTP status it maps to.
class Refusal : public Error {
 public:
  Refusal(int status, const std::string& what) : Error(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// Every rank: the rows the sessions keep between jobs, and their ids.
struct KeptRows {
  std::vector<KVCache> caches;  // one per layer, made by the first batch
  std::set<std::int32_t> ids;   // the sequences kept after their batch
  void erase(std::int32_t id);
  void clear();
  std::int64_t rows() const;  // this rank's, per layer
};


class SessionTable {
 public:
  // `ranks`: the ranks a prompt's prefill is spread over (the groups, under --tp).
  SessionTable(std::int64_t capacity, double ttl_seconds, std::int64_t context, int ranks = 1)
      : capacity_(capacity), ttl_(ttl_seconds), context_(context), ranks_(ranks) {}

  // A request arriving (rank 0, under the service's lock): `open` starts a session on it,
  // `session` names one it continues (its prompt then is the new tokens, without BOS).
  // Sets g's sequence, keep, feed, continues (and cut_from, cached, for a prefix found in
  // the cache) and reservation; throws Refusal (404 unknown
  // session, 409 one busy with another request, 400 past the model's context, 413 past
  // the capacity, 503 not now).
  // `look_up` false: no prefix-cache lookup (a sample of n > 1, which copies its request's rows).
  void admit(Generation& g, bool open, const std::string& session, bool look_up = true);
  // A request that missed at admission, taken into a round now (before it ran): the entries
  // filed since (a reply that ended in the round it arrived during, its entry filed when that
  // round ended) are looked up again, at every take until it runs. Its reservation holds
  // either way (a hit's rows are the prompt's). True when it took an entry.
  bool look_again(Generation& g);
  // The request ended: ok (its reply complete, `r` its result) or not (failed, or its
  // client left: a session on it ends). True when the table keeps its rows (a session's,
  // or a new entry of the prefix cache); else the caller erases them if it has any.
  bool finish(Generation& g, const infer::SequenceResult* r, bool ok);
  // Ends session `id` now (or when its running request ends). Throws Refusal (404).
  void close(const std::string& id);
  void expire(Clock::time_point now);  // the idle ones past their ttl
  void drop_all();                     // the ring re-formed: every row is gone
  std::vector<std::int32_t> take_ended();  // sequences to erase on every rank
  bool has_ended() const { return !ended_.empty(); }

  std::size_t size() const { return sessions_.size(); }
  std::int64_t reserved() const { return reserved_; }
  std::int64_t capacity() const { return capacity_; }
  std::uint64_t evicted() const { return evicted_; }  // idle sessions ended to make room, ever
  std::int64_t admitted() const { return admitted_; }  // requests admitted and not finished yet
  struct CacheFigures {
    std::size_t entries = 0;
    std::int64_t rows = 0;            // held by the entries, ring-wide
    std::uint64_t lookups = 0;        // prompts looked up (every request without a session to continue)
    std::uint64_t hits = 0;           // of which took an entry
    std::uint64_t cached_tokens = 0;  // prompt tokens not computed, summed
    std::uint64_t evicted = 0;        // entries ended to make room
  };
  CacheFigures cache_figures() const;

 private:
  struct Session {
    std::int32_t sequence = 0;
    infer::Continuation next;            // where its next token goes
    std::optional<std::int32_t> pending;  // chosen last, not fed
    std::int64_t rows = 0;               // history rows cached, ring-wide
    Clock::time_point used = Clock::now();
    bool busy = false, close_when_done = false;
  };
  struct Entry {  // a whole reply's rows, kept for prompts that start the same way
    std::int32_t sequence = 0;
    std::vector<std::int32_t> tokens;  // the tokens its rows hold, in order
    std::int64_t base = 0;             // the ring position of its first row (the next: base + tokens)
    Clock::time_point used = Clock::now();
  };
  struct Hit {
    std::size_t entry = 0;
    std::int64_t shared = 0;  // its rows the prompt reuses
  };
  std::optional<Hit> look_up(const std::vector<std::int32_t>& prompt) const;
  void take_entry(Generation& g, const Hit& hit);  // g continues the entry's rows past the shared part
  std::int32_t new_sequence();
  std::string new_session_id();
  void end(std::map<std::string, Session>::iterator it);

  std::int64_t capacity_;
  double ttl_;
  std::int64_t context_;
  int ranks_;
  std::int64_t reserved_ = 0;
  std::vector<Entry> entries_;
  CacheFigures figures_;
  std::int64_t admitted_ = 0;
  std::int32_t next_sequence_ = 0;
  std::uint64_t evicted_ = 0;
  std::map<std::string, Session> sessions_;
  std::vector<std::int32_t> ended_;
};

}  // namespace ringattn::serve
