// infer — a grammar against a vocabulary (matcher.hpp).
#include "matcher.hpp"

#include "mask_memo.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <array>
#include <bit>
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
  std::unordered_map<std::uint64_t, std::shared_ptr<const MaskEntry>> entries;  // (serial, node, depth)
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> fit;            // (node, frame)
  // A node's bytes, as the trie walks step through them (row_index).
  struct Row {
    std::array<std::uint32_t, 256> next;  // the one plain node a byte leads to (its need above bit 24), kDead, kSlow
    std::uint32_t node, succ;             // succ: where the bytes of the classes `uniform` all lead
    std::uint16_t uniform;
    std::uint16_t run;  // uniform steps that can follow one another from here (0: not counted yet)
  };
  std::vector<std::uint32_t> row_at;  // into rows, by node; 0: not made yet
  std::vector<Row> rows{1};
  std::vector<Config> one;                     // walk(): a level's one configuration,
  std::vector<std::uint32_t> fast, room;       // its row (0: none), kMaxNesting - its depth
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

  static constexpr std::uint32_t kDead = 0xFFFFFFFFu, kSlow = 0xFFFFFFFEu;

  // Node's row, made on first use: for each byte, the one plain node it leads to with that
  // node's need above bit 24 (states are fewer than 2^24, needs at most kMaxNesting), kDead, or
  // kSlow (more than one range, or a node that is not plain: step() decides). And the classes
  // of bytes that all lead to one plain node of need 0, succ: a string's characters (to the
  // body itself, or to the next position of a counted string).
  std::uint32_t row_index(std::uint32_t node) {
    if (row_at.empty()) row_at.assign(g.states(), 0);
    if (row_at[node] != 0) return row_at[node];
    Row r{};
    r.node = node;
    r.next.fill(kDead);
    for (const Grammar::Range& range : g.ranges(node))
      for (unsigned b = range.lo; b <= range.hi; ++b)
        r.next[b] = r.next[b] == kDead && g.plain(range.to) && g.need(range.to) != kNever ? range.to | (g.need(range.to) << 24) : kSlow;
    r.succ = kDead;
    std::uint32_t class_to[16];
    std::fill(std::begin(class_to), std::end(class_to), kSlow - 1);  // not seen yet
    for (unsigned b = 0; b < 256; ++b) {
      const int c = std::countr_zero(TokenTrie::byte_class(static_cast<std::uint8_t>(b)));
      const std::uint32_t to = r.next[b] == kDead || r.next[b] == kSlow || (r.next[b] >> 24) != 0 ? kSlow : r.next[b];
      class_to[c] = class_to[c] == kSlow - 1 || class_to[c] == to ? to : kSlow;
    }
    r.succ = class_to[std::countr_zero(TokenTrie::byte_class('a'))];
    for (int c = 0; c < 16; ++c)
      if (r.succ < kSlow - 1 && class_to[c] == r.succ) r.uniform |= static_cast<std::uint16_t>(1u << c);
    const auto at = static_cast<std::uint32_t>(rows.size());
    rows.push_back(r);
    row_at[node] = at;
    return at;
  }

  // How many uniform steps follow one another from row r's node: each to the node's succ, whose
  // own uniform classes take at least the same; counted as far as the longest token.
  std::uint32_t run(std::uint32_t r) {
    if (rows[r].run != 0 || rows[r].uniform == 0) return rows[r].run;
    const auto cap = static_cast<std::uint32_t>(std::min<std::size_t>(tokens.longest(), 0xFFFF));
    std::uint32_t n = 1, x = r;
    while (n < cap) {
      const std::uint32_t succ = rows[x].succ;
      if (succ == rows[x].node) {  // a loop: as many as any token has
        n = cap;
        break;
      }
      const std::uint32_t y = row_index(succ);
      if ((rows[y].uniform & rows[r].uniform) != rows[r].uniform) break;
      ++n;
      x = y;
    }
    rows[r].run = static_cast<std::uint16_t>(n);
    return n;
  }

  // step(), first trying the common case of the trie walks: one configuration, and the byte
  // leads to one plain node (a string's body on a character).
  void fast_step(const std::vector<Config>& from, std::uint8_t b, std::vector<Config>& out, Flags& flags) {
    if (from.size() == 1) {
      const Config c = from[0];
      const std::uint32_t v = rows[row_index(c.node)].next[b];
      if (v == kDead) {
        out.clear();
        flags = {};
        return;
      }
      if (v != kSlow && frames[c.frame].depth + (v >> 24) <= kMaxNesting) {
        out.assign(1, {v & 0xFFFFFFu, c.frame});
        flags = {};
        return;
      }
    }
    step(from, b, out, flags);
  }

  // Whether `bytes` may follow from configuration c, its real frames below.
  bool fits(Config c, std::string_view bytes) {
    std::vector<Config>& cur = scratch_a;
    std::vector<Config>& next = scratch_b;
    cur.assign(1, c);
    Flags flags;
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      fast_step(cur, static_cast<std::uint8_t>(bytes[k]), next, flags);
      if (next.empty()) return k + 1 == bytes.size() && flags.accepting;
      std::swap(cur, next);
    }
    return true;
  }

  // The walk from (node, depth): this matcher's, the grammar's memo, or made now.
  const MaskEntry& entry(std::uint32_t node, std::uint32_t depth) {
    const std::uint64_t key = (tokens.serial() << 40) | (std::uint64_t{node} << 8) | depth;
    auto& mine = entries[key];
    if (!mine) mine = g.memo().find(key);
    if (!mine) mine = g.memo().keep(key, walk(node, depth));
    return *mine;
  }

  // The uncertain tokens of (node, depth) that fit configuration c, its frames as they are:
  // found once per configuration (frames are interned: the same c, the same answer).
  const std::vector<std::int32_t>& fitting(Config c, const MaskEntry& e) {
    const auto [it, fresh] = fit.try_emplace((std::uint64_t{c.node} << 32) | c.frame);
    if (fresh)
      for (const std::int32_t id : e.uncertain)
        if (fits(c, tokens.bytes(id))) it->second.push_back(id);
    return it->second;
  }

  // The trie walked from (node, the base frame of `depth`), depth first, a dead prefix's subtree
  // skipped. A level that is one configuration steps through its node's row (the common case:
  // a string's body), and takes at once a subtree whose bytes it takes in uniform steps (a
  // string's characters: plain ASCII in a string's body, or in a counted string with room for
  // them); the others step through step().
  MaskEntry walk(std::uint32_t node, std::uint32_t depth) {
    const TokenTrie& t = tokens.trie();
    MaskEntry e;
    e.accepted.assign((static_cast<std::size_t>(tokens.vocab()) + 63) / 64, 0);
    auto ids_of = [&](std::uint32_t a, std::uint32_t z) { return std::span<const std::int32_t>(t.ids).subspan(t.id_at[a], t.id_at[z] - t.id_at[a]); };
    // Level k: one configuration one[k] whose node's row is rows[fast[k]] (fast[k] != 0), or levels[k].
    one.resize(levels.size());
    fast.resize(levels.size());
    room.resize(levels.size());
    auto settle = [&](std::size_t k) {  // levels[k] made by step(): one configuration goes fast
      fast[k] = 0;
      if (levels[k].size() != 1) return;
      one[k] = levels[k][0];
      fast[k] = row_index(one[k].node);
      room[k] = kMaxNesting - frames[one[k].frame].depth;
    };
    levels[0].assign(1, {node, 1 + depth});
    settle(0);
    std::uint32_t uncertain_until = 0;  // nodes below an escape: what dies there depends on the frames
    Flags flags;
    std::vector<Config> single(1);
    const auto n = static_cast<std::uint32_t>(t.nodes());
    for (std::uint32_t i = 1; i < n;) {
      const std::uint16_t k = t.depth[i];
      // The whole subtree in uniform steps from one[k - 1] (a string's characters): all of it taken.
      if (fast[k - 1] && (t.classes[i] & ~rows[fast[k - 1]].uniform) == 0 && t.height[i] <= run(fast[k - 1])) {
        for (const std::int32_t id : ids_of(i, t.end[i])) set(e.accepted, static_cast<std::size_t>(id));
        i = t.end[i];
        continue;
      }
      const std::uint8_t b = t.byte[i];
      bool live = true, escaped = false;
      const std::uint32_t v = fast[k - 1] ? rows[fast[k - 1]].next[b] : kSlow;
      if (v == kDead) {
        live = false;
      } else if (v != kSlow && (v >> 24) <= room[k - 1]) {
        one[k] = {v & 0xFFFFFFu, one[k - 1].frame};
        fast[k] = row_index(one[k].node);
        room[k] = room[k - 1];
      } else {
        if (fast[k - 1]) single[0] = one[k - 1];
        step(fast[k - 1] ? single : levels[k - 1], b, levels[k], flags);
        escaped = flags.escaped;
        live = !levels[k].empty();
        settle(k);
      }
      if (escaped) uncertain_until = std::max(uncertain_until, t.end[i]);
      if (live || escaped) {
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
    std::size_t count = 0;
    for (const std::uint64_t w : e.accepted) count += static_cast<std::size_t>(std::popcount(w));
    if (count < e.accepted.size() * 2) {  // few (a place in the JSON's structure): as ids
      for (std::size_t w = 0; w < e.accepted.size(); ++w)
        for (std::uint64_t bits = e.accepted[w]; bits; bits &= bits - 1)
          e.accepted_ids.push_back(static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(bits))));
      e.accepted = {};
    }
    return e;
  }

  void allowed(std::vector<std::uint64_t>& bits, std::size_t size) {
    bits.assign((size + 63) / 64, 0);
    if (ended) return;
    std::vector<std::uint64_t> mine((static_cast<std::size_t>(tokens.vocab()) + 63) / 64, 0);
    for (const Config c : state) {
      const MaskEntry& e = entry(c.node, frames[c.frame].depth);
      for (std::size_t w = 0; w < e.accepted.size(); ++w) mine[w] |= e.accepted[w];
      for (const std::int32_t id : e.accepted_ids) set(mine, static_cast<std::size_t>(id));
      for (const std::int32_t id : fitting(c, e)) set(mine, static_cast<std::size_t>(id));
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

bool Matcher::allows(std::int32_t token) const {
  Impl& m = *impl_;
  if (m.ended) return false;
  if (std::find(m.ends.begin(), m.ends.end(), token) != m.ends.end()) return m.accepting;
  if (!m.tokens.text(token)) return false;
  for (const Config c : m.state)
    if (m.fits(c, m.tokens.bytes(token))) return true;
  return false;
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
