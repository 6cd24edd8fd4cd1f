// ringattn serve — sessions and their cache rows (sessions.hpp).
#include "sessions.hpp"

#include "../plan/cost_model.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

namespace ringattn::serve {

void KeptRows::erase(std::int32_t id) {
  for (KVCache& c : caches) c.erase(id);
  ids.erase(id);
}

void KeptRows::clear() {
  caches.clear();
  ids.clear();
}

std::int64_t KeptRows::rows() const { return caches.empty() ? 0 : caches.front().rows(); }

std::int32_t SessionTable::new_sequence() {
  if (next_sequence_ == std::numeric_limits<std::int32_t>::max())
    throw Refusal(503, "this ring has used every KV-cache sequence id (2^31 requests): restart rank 0");
  return next_sequence_++;
}

// 128 bits from the kernel's generator: a session is reachable only by whoever was told its id.
std::string SessionTable::new_session_id() {
  for (;;) {
    unsigned char b[16];
    std::size_t got = 0;
    while (got < sizeof b) {
      const ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
      if (n < 0 && errno != EINTR) throw Refusal(503, std::string("no random bytes for a session id: ") + std::strerror(errno));
      if (n > 0) got += static_cast<std::size_t>(n);
    }
    std::string id = "sess-";
    static constexpr char kHex[] = "0123456789abcdef";
    for (const unsigned char c : b) {
      id += kHex[c >> 4];
      id += kHex[c & 15];
    }
    if (!sessions_.count(id)) return id;
  }
}

std::optional<SessionTable::Hit> SessionTable::look_up(const std::vector<std::int32_t>& prompt) const {
  std::optional<Hit> best;
  const auto most = static_cast<std::int64_t>(prompt.size()) - 1;  // the last token is computed: its logits choose
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    const std::vector<std::int32_t>& t = entries_[e].tokens;
    const auto n = static_cast<std::int64_t>(std::min<std::size_t>(t.size(), prompt.size()));
    std::int64_t shared = std::mismatch(t.begin(), t.begin() + n, prompt.begin()).first - t.begin();
    shared = std::min(shared, most);
    if (shared > 0 && (!best || shared > best->shared)) best = Hit{e, shared};
  }
  if (best && !plan::prefix_pays(best->shared, static_cast<std::int64_t>(prompt.size()) - best->shared, ranks_)) return std::nullopt;
  return best;
}

void SessionTable::admit(Generation& g, bool open, const std::string& session, bool look_up) {
  Session* s = nullptr;
  std::int64_t history = 0;
  if (!session.empty()) {
    auto it = sessions_.find(session);
    if (it == sessions_.end())
      throw Refusal(404, "no session " + session + ": it was closed, expired (idle over " + std::to_string(static_cast<long long>(ttl_)) +
                             " s), evicted while idle to make room in a full cache (least recently used first) or ended with the ring's last "
                             "re-forming; open a new one with \"session\": true");
    s = &it->second;
    if (s->busy) throw Refusal(409, "session " + session + " is busy with another request; send the next message when its reply is done");
    if (s->pending) g.prompt.insert(g.prompt.begin(), *s->pending);
    history = s->next.rope_position;
  }
  std::optional<Hit> hit;
  if (!s && look_up) {
    ++figures_.lookups;
    hit = this->look_up(g.prompt);
    if (hit) history = hit->shared;
  }
  const std::int64_t fed = static_cast<std::int64_t>(g.prompt.size()) - (hit ? hit->shared : 0);
  const std::int64_t need = history + fed + g.max_tokens;
  if (context_ > 0 && need > context_)
    throw Refusal(400, (s ? "session " + session + "'s " + std::to_string(history) + " tokens of history, " : std::string()) +
                           "the prompt's " + std::to_string(g.prompt.size()) + " tokens and max_tokens " + std::to_string(g.max_tokens) +
                           " exceed the model's context of " + std::to_string(context_) + " positions");
  if (need > capacity_)
    throw Refusal(413, "the request needs " + std::to_string(need) + " KV-cache rows, and the ring holds at most " +
                           std::to_string(capacity_) + " (cache_mib on every daemon)");
  const std::int32_t taken = hit ? entries_[hit->entry].sequence : -1;  // by sequence: evictions move the entries
  const std::int64_t taken_rows = hit ? static_cast<std::int64_t>(entries_[hit->entry].tokens.size()) : 0;
  std::int64_t others = reserved_ - (s ? s->rows : 0) - taken_rows;
  // Idle rows never keep a request out: the prefix cache's entries go first, then idle
  // sessions, each least recently used first, until it fits (none goes for a request that
  // would not fit even then).
  std::int64_t idle = 0;
  for (const auto& [id, x] : sessions_)
    if (!x.busy && &x != s) idle += x.rows;
  for (const Entry& e : entries_)
    if (e.sequence != taken) idle += static_cast<std::int64_t>(e.tokens.size());
  while (others + need > capacity_ && others - idle + need <= capacity_) {
    auto lru_entry = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->sequence != taken && (lru_entry == entries_.end() || it->used < lru_entry->used)) lru_entry = it;
    if (lru_entry != entries_.end()) {
      const auto rows = static_cast<std::int64_t>(lru_entry->tokens.size());
      others -= rows;
      idle -= rows;
      reserved_ -= rows;
      ended_.push_back(lru_entry->sequence);
      ++figures_.evicted;
      entries_.erase(lru_entry);
      continue;
    }
    auto lru = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it)
      if (!it->second.busy && (!s || &it->second != s) && (lru == sessions_.end() || it->second.used < lru->second.used)) lru = it;
    if (lru == sessions_.end()) break;
    others -= lru->second.rows;
    idle -= lru->second.rows;
    ++evicted_;
    end(lru);
  }
  if (others + need > capacity_)
    throw Refusal(503, "the request needs " + std::to_string(need) + " KV-cache rows; " + std::to_string(capacity_ - others) + " of " +
                           std::to_string(capacity_) + " are free now (sessions and requests in flight hold the rest): retry later or close idle sessions");
  g.feed = g.prompt;
  if (s) {
    g.session = session;
    g.sequence = s->sequence;
    g.continues = s->next;
    s->busy = true;
    reserved_ += need - s->rows;
    s->rows = 0;  // counted in the request's reservation while it runs
  } else {
    if (hit) {
      const auto e = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.sequence == taken; });
      take_entry(g, Hit{static_cast<std::size_t>(e - entries_.begin()), hit->shared});
    } else {
      g.sequence = new_sequence();
      g.missed = look_up && !open;  // (a session opened on it keeps the sequence it names)
    }
    if (open) {
      g.session = new_session_id();
      Session n;
      n.sequence = g.sequence;
      n.busy = true;
      sessions_.emplace(g.session, n);
    }
    reserved_ += need;
  }
  g.keep = !g.session.empty();
  g.reserved = need;
  ++admitted_;
}

void SessionTable::take_entry(Generation& g, const Hit& hit) {
  // The entry's rows past the shared part go (cut on every rank in g's first round); the
  // prompt's rest goes on from there.
  const Entry& e = entries_[hit.entry];
  const auto rows = static_cast<std::int64_t>(e.tokens.size());
  g.sequence = e.sequence;
  g.continues = infer::Continuation{e.base + hit.shared, hit.shared};
  if (hit.shared < rows) g.cut_from = e.base + hit.shared;
  g.cached = hit.shared;
  g.ran = true;  // its sequence has rows on every rank
  g.missed = false;
  g.feed.erase(g.feed.begin(), g.feed.begin() + hit.shared);
  reserved_ -= rows;  // now the request's, within its reservation
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(hit.entry));
  ++figures_.hits;
  figures_.cached_tokens += static_cast<std::uint64_t>(hit.shared);
}

bool SessionTable::look_again(Generation& g) {
  if (!g.missed || g.ran || !g.session.empty() || g.settled) return false;
  const std::optional<Hit> hit = look_up(g.prompt);
  if (!hit) return false;
  take_entry(g, *hit);  // the sequence admit gave it never held a row
  return true;
}

bool SessionTable::finish(Generation& g, const infer::SequenceResult* r, bool ok) {
  if (g.settled) return false;
  g.settled = true;
  --admitted_;
  reserved_ -= g.reserved;
  g.reserved = 0;
  if (g.session.empty()) {
    // A whole reply's rows become an entry of the prefix cache: its prompt and every token
    // chosen but the last (never fed).
    if (!ok || !r || g.chosen.empty()) return false;
    Entry e;
    e.sequence = g.sequence;
    e.tokens = g.prompt;
    e.tokens.insert(e.tokens.end(), g.chosen.begin(), g.chosen.end() - 1);
    e.base = r->next.ring_position - r->next.rope_position;
    if (static_cast<std::int64_t>(e.tokens.size()) != r->next.rope_position) return false;  // cannot happen; never cache a doubt
    reserved_ += static_cast<std::int64_t>(e.tokens.size());
    entries_.push_back(std::move(e));
    return true;
  }
  auto it = sessions_.find(g.session);
  if (it == sessions_.end()) return true;  // dropped with the ring meanwhile (its rows went with it)
  Session& s = it->second;
  s.busy = false;
  s.used = Clock::now();
  if (!ok || !r || s.close_when_done) {
    end(it);
    return true;
  }
  s.next = r->next;
  // A reply cut at max_tokens leaves its last token chosen and not fed: the next message
  // starts with it. One that ended at an end token (BOS or EOS...) leaves it out of the history.
  s.pending.reset();
  if (!r->tokens.empty() && !g.end_token) s.pending = r->tokens.back();
  s.rows = s.next.rope_position;
  reserved_ += s.rows;
  return true;
}

SessionTable::CacheFigures SessionTable::cache_figures() const {
  CacheFigures f = figures_;
  f.entries = entries_.size();
  for (const Entry& e : entries_) f.rows += static_cast<std::int64_t>(e.tokens.size());
  return f;
}

void SessionTable::close(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) throw Refusal(404, "no session " + id + " (closed, expired, or gone with the ring's re-forming)");
  if (it->second.busy) it->second.close_when_done = true;
  else end(it);
}

void SessionTable::end(std::map<std::string, Session>::iterator it) {
  if (!it->second.busy) reserved_ -= it->second.rows;
  ended_.push_back(it->second.sequence);
  sessions_.erase(it);
}

void SessionTable::expire(Clock::time_point now) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto next = std::next(it);
    if (!it->second.busy && std::chrono::duration<double>(now - it->second.used).count() > ttl_) end(it);
    it = next;
  }
}

void SessionTable::drop_all() {
  for (auto& [id, s] : sessions_)
    if (!s.busy) reserved_ -= s.rows;
  for (const Entry& e : entries_) reserved_ -= static_cast<std::int64_t>(e.tokens.size());
  entries_.clear();
  sessions_.clear();
  ended_.clear();
}

std::vector<std::int32_t> SessionTable::take_ended() { return std::exchange(ended_, {}); }

}  // namespace ringattn::serve
