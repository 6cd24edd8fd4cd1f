// infer — byte-pair encoding by merge rank (bpe.hpp).
#include "bpe.hpp"

#include <array>
#include <queue>

#include "../common/unicode.hpp"

namespace infer {

void BpeMerges::add(int left, int right, int merged, int rank) { merges_.try_emplace(key(left, right), Merge{rank, merged}); }

const BpeMerges::Merge* BpeMerges::find(int left, int right) const {
  const auto it = merges_.find(key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeMerges::apply(std::vector<int>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  // A doubly linked list over the symbols; a merged-away symbol has id -1.
  std::vector<int> prev(static_cast<std::size_t>(n)), next(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    prev[static_cast<std::size_t>(i)] = i - 1;
    next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  // A candidate: the pair starting at `pos` as it was when pushed (ids `left`, `right`).
  struct Candidate {
    int rank, pos, left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int pos) {
    if (pos < 0) return;
    const int nx = next[static_cast<std::size_t>(pos)];
    if (nx < 0) return;
    const int l = symbols[static_cast<std::size_t>(pos)], r = symbols[static_cast<std::size_t>(nx)];
    if (const Merge* m = find(l, r)) heap.push({m->rank, pos, l, r});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const auto p = static_cast<std::size_t>(c.pos);
    const int nx = next[p];
    // Stale: one side was merged away or changed since this pair was pushed.
    if (symbols[p] != c.left || nx < 0 || symbols[static_cast<std::size_t>(nx)] != c.right) continue;
    symbols[p] = find(c.left, c.right)->merged;
    symbols[static_cast<std::size_t>(nx)] = -1;
    next[p] = next[static_cast<std::size_t>(nx)];
    if (next[p] >= 0) prev[static_cast<std::size_t>(next[p])] = c.pos;
    push(prev[p]);
    push(c.pos);
  }
  std::size_t w = 0;
  for (const int s : symbols)
    if (s >= 0) symbols[w++] = s;
  symbols.resize(w);
}

namespace {

struct ByteMap {
  std::array<std::string, 256> chars;
  std::array<int, 0x200> bytes{};  // by code point; every mapped character is below U+0200
  ByteMap() {
    bytes.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      unicode::append_utf8(chars[static_cast<std::size_t>(b)], c);
      bytes[c] = b;
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

const std::string& byte_char(unsigned char b) { return byte_map().chars[b]; }

int char_byte(char32_t c) { return c < 0x200 ? byte_map().bytes[c] : -1; }

}  // namespace infer
