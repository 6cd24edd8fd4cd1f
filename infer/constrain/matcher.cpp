// infer — a grammar against a vocabulary (matcher.hpp).
#include "matcher.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace infer::constrain {

namespace {

struct Config {
  std::uint32_t node, frame;
  bool operator==(const Config&) const = default;
  bool operator<(const Config& o) const { return node != o.node ? node < o.node : frame < o.frame; }
};

// A stack frame, interned: frame 0 is the empty stack, frames 1 .. kMaxNesting + 1 the bases of
// the trie walks at depths 0 .. kMaxNesting (a pop there leaves the rule the walk started in).
struct Frame {
  std::uint32_t parent, ret, depth;
  bool base;
};

struct Flags {
  bool accepting = false;  // a configuration ended the outermost rule: the text is complete
  bool escaped = false;    // one popped a walk's base frame
};

// What the tokens do from (node, depth): accepted whatever the frames below, or to be checked
// against them; the rest never.
struct Entry {
  std::vector<std::uint64_t> accepted;
  std::vector<std::int32_t> uncertain;
};

void set(std::vector<std::uint64_t>& bits, std::size_t i) { bits[i >> 6] |= std::uint64_t{1} << (i & 63); }
bool get(const std::vector<std::uint64_t>& bits, std::size_t i) { return (bits[i >> 6] >> (i & 63)) & 1; }

}  // namespace

struct Matcher::Impl {
  Grammar g;
  TokenBytes tokens;
  std::vector<std::int32_t> ends;
  std::vector<Config> state;
  bool accepting = false, ended = false;

  // Caches and scratch: mask() is const to the caller, not to these.
  std::vector<Frame> frames;
  std::unordered_map<std::uint64_t, std::uint32_t> frame_ids;
  std::unordered_map<std::uint64_t, Entry> entries;
  std::vector<std::vector<Config>> levels;
  std::vector<Config> scratch_a, scratch_b;

  Impl(const Grammar& grammar, const TokenBytes& t, std::vector<std::int32_t> e) : g(grammar), tokens(t), ends(std::move(e)) {
    frames.push_back({0, 0, 0, false});
    for (std::uint32_t d = 0; d <= kMaxNesting; ++d) frames.push_back({0, 0, d, true});
    levels.resize(tokens.longest() + 1);
    Flags f;
    enter(g.start(), 0, state, f);
    normalize(state);
    accepting = f.accepting;
  }

  std::uint32_t push(std::uint32_t parent, const Grammar::Push& p) {
    const std::uint64_t key = (std::uint64_t{parent} << 32) | (std::uint64_t{p.ret} << 1) | (p.weight & 1);
    const auto [it, fresh] = frame_ids.try_emplace(key, static_cast<std::uint32_t>(frames.size()));
    if (fresh) frames.push_back({parent, p.ret, frames[parent].depth + p.weight, false});
    return it->second;
  }

  // The configurations node m (just entered, by a byte or a return) stands for on frame f: its
  // closure's, with their frames pushed; where it ends its rule, the frame's return's, and so on.
  // Only live ones (depth + need within kMaxNesting) are made.
  void enter(std::uint32_t m, std::uint32_t f, std::vector<Config>& out, Flags& flags) {
    for (;;) {
      for (const Grammar::Item& it : g.closure(m)) {
        std::uint32_t ff = f;
        bool live = true;
        for (const Grammar::Push& p : g.pushes(it)) {
          const std::uint32_t depth = frames[ff].depth;
          if (g.need(p.ret) == kNever || depth + g.need(p.ret) > kMaxNesting || depth + p.weight > kMaxNesting) {
            live = false;
            break;
          }
          ff = push(ff, p);
        }
        const std::uint32_t need = g.need(it.node);
        if (live && need != kNever && frames[ff].depth + need <= kMaxNesting) out.push_back({it.node, ff});
      }
      if (!g.pops(m)) return;
      const Frame fr = frames[f];
      if (f == 0) {
        flags.accepting = true;
        return;
      }
      if (fr.base) {
        flags.escaped = true;
        return;
      }
      m = fr.ret;
      f = fr.parent;
    }
  }

  static void normalize(std::vector<Config>& v) {
    if (v.size() < 2) return;
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }

  void step(const std::vector<Config>& from, std::uint8_t b, std::vector<Config>& out, Flags& flags) {
    out.clear();
    flags = {};
    for (const Config& c : from)
      for (const Grammar::Range& r : g.ranges(c.node)) {
        if (r.lo > b) break;
        if (b <= r.hi) enter(r.to, c.frame, out, flags);
      }
    normalize(out);
  }

  // Whether `bytes` may follow from configuration c, its real frames below.
  bool fits(Config c, std::string_view bytes) {
    std::vector<Config>& cur = scratch_a;
    std::vector<Config>& next = scratch_b;
    cur.assign(1, c);
    Flags flags;
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      step(cur, static_cast<std::uint8_t>(bytes[k]), next, flags);
      if (next.empty()) return k + 1 == bytes.size() && flags.accepting;
      std::swap(cur, next);
    }
    return true;
  }

  const Entry& entry(std::uint32_t node, std::uint32_t depth) {
    const std::uint64_t key = (std::uint64_t{node} << 8) | depth;
    if (const auto it = entries.find(key); it != entries.end()) return it->second;
    Entry e = walk(node, depth);
    return entries.emplace(key, std::move(e)).first->second;
  }

  // The trie walked from (node, the base frame of `depth`).
  Entry walk(std::uint32_t node, std::uint32_t depth) {
    const TokenTrie& t = tokens.trie();
    Entry e;
    e.accepted.assign((static_cast<std::size_t>(tokens.vocab()) + 63) / 64, 0);
    auto ids_of = [&](std::uint32_t a, std::uint32_t z) { return std::span<const std::int32_t>(t.ids).subspan(t.id_at[a], t.id_at[z] - t.id_at[a]); };
    levels[0].assign(1, {node, 1 + depth});
    std::uint32_t uncertain_until = 0;  // nodes below an escape: what dies there depends on the frames
    Flags flags;
    const auto n = static_cast<std::uint32_t>(t.nodes());
    for (std::uint32_t i = 1; i < n;) {
      const std::uint16_t k = t.depth[i];
      std::vector<Config>& here = levels[k];
      step(levels[k - 1], t.byte[i], here, flags);
      if (flags.escaped) uncertain_until = std::max(uncertain_until, t.end[i]);
      const bool live = !here.empty();
      if (live || flags.escaped) {
        for (const std::int32_t id : ids_of(i, i + 1)) set(e.accepted, static_cast<std::size_t>(id));
      } else if (i < uncertain_until) {
        const auto ids = ids_of(i, i + 1);
        e.uncertain.insert(e.uncertain.end(), ids.begin(), ids.end());
      }
      if (live) {
        ++i;
        continue;
      }
      if (i + 1 < uncertain_until) {  // the skipped subtree, as far as it is below an escape
        const auto ids = ids_of(i + 1, std::min(t.end[i], uncertain_until));
        e.uncertain.insert(e.uncertain.end(), ids.begin(), ids.end());
      }
      i = t.end[i];
    }
    return e;
  }

  void allowed(std::vector<std::uint64_t>& bits, std::size_t size) {
    bits.assign((size + 63) / 64, 0);
    if (ended) return;
    std::vector<std::uint64_t> mine((static_cast<std::size_t>(tokens.vocab()) + 63) / 64, 0);
    for (const Config c : state) {
      const Entry& e = entry(c.node, frames[c.frame].depth);
      for (std::size_t w = 0; w < mine.size(); ++w) mine[w] |= e.accepted[w];
      for (const std::int32_t id : e.uncertain)
        if (!get(mine, static_cast<std::size_t>(id)) && fits(c, tokens.bytes(id))) set(mine, static_cast<std::size_t>(id));
    }
    for (const std::int32_t id : ends)
      if (static_cast<std::size_t>(id) < static_cast<std::size_t>(tokens.vocab())) mine[static_cast<std::size_t>(id) >> 6] &= ~(std::uint64_t{1} << (id & 63));
    const std::size_t words = std::min(bits.size(), mine.size());
    std::copy(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(words), bits.begin());
    if (size < static_cast<std::size_t>(tokens.vocab()) && size % 64)  // ids at or past `size` are not in the mask
      bits.back() &= (std::uint64_t{1} << (size % 64)) - 1;
    if (accepting)
      for (const std::int32_t id : ends)
        if (static_cast<std::size_t>(id) < size) set(bits, static_cast<std::size_t>(id));
  }
};

Matcher::Matcher(const Grammar& grammar, const TokenBytes& tokens, std::vector<std::int32_t> end_tokens) {
  for (const std::int32_t id : end_tokens)
    if (id < 0) throw ringattn::InvalidArgument("end token " + std::to_string(id) + " is not a token id");
  impl_ = std::make_unique<Impl>(grammar, tokens, std::move(end_tokens));
}

Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

void Matcher::allowed(std::vector<std::uint64_t>& bits, std::size_t size) const { impl_->allowed(bits, size); }

void Matcher::mask(std::span<float> logits) const {
  std::vector<std::uint64_t> bits;
  impl_->allowed(bits, logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (!get(bits, i)) logits[i] = -std::numeric_limits<float>::infinity();
}

void Matcher::advance(std::int32_t token) {
  Impl& m = *impl_;
  auto refuse = [&](const std::string& why) {
    return ringattn::InvalidArgument("token " + std::to_string(token) + " may not come next in the response format's grammar: " + why);
  };
  if (m.ended) throw refuse("the text has ended");
  if (std::find(m.ends.begin(), m.ends.end(), token) != m.ends.end()) {
    if (!m.accepting) throw refuse("an end token before the value is complete");
    m.ended = true;
    m.state.clear();
    return;
  }
  if (!m.tokens.text(token)) throw refuse("it is no text (a special token, or past the vocabulary)");
  const std::string_view bytes = m.tokens.bytes(token);
  std::vector<Config> cur = m.state, next;
  Flags flags;
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    m.step(cur, static_cast<std::uint8_t>(bytes[k]), next, flags);
    if (next.empty() && !(k + 1 == bytes.size() && flags.accepting)) throw refuse("its bytes do not fit");
    std::swap(cur, next);
  }
  m.state = std::move(cur);
  m.accepting = flags.accepting;
}

bool Matcher::complete() const { return impl_->accepting && !impl_->ended; }
bool Matcher::done() const { return complete() && impl_->state.empty(); }
bool Matcher::ended() const { return impl_->ended; }

}  // namespace infer::constrain
