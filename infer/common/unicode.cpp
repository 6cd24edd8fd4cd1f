// infer — UTF-8, JavaScript's character classes and NFC (unicode.hpp) over the generated
// tables (unicode_tables.cpp). Every table is sorted, so each lookup is one binary search.
//
// UTF-8 follows the WHATWG decoder step for step, because its U+FFFD count is what the
// oracle (Node) produces: a byte that cannot continue the sequence in hand ends it with one
// U+FFFD and is then read again as the start of the next, and the bounds on the second byte
// (E0: A0-BF, ED: 80-9F, F0: 90-BF, F4: 80-8F) refuse overlongs, surrogates and code points
// past U+10FFFF as early as the byte that makes them so.
//
// NFC is UAX #15's definition done literally: full canonical decomposition, a stable sort of
// each run of non-starters by combining class, then composition of each character with the
// last starter unless a character in between blocks it (a starter, or a class >= its own).
#include "unicode.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "unicode_tables.hpp"

namespace infer::unicode {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

// What a byte means at the start of a sequence: how many continuation bytes follow, and
// the range the first of them must fall in. needed == 0: ASCII; needed < 0: never a lead.
struct Lead {
  int needed;
  unsigned char lower, upper;
  char32_t bits;  // the lead byte's payload
};

Lead lead(unsigned char b) {
  if (b <= 0x7F) return {0, 0x80, 0xBF, b};
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF, char32_t(b & 0x1F)};
  if (b >= 0xE0 && b <= 0xEF)
    return {2, static_cast<unsigned char>(b == 0xE0 ? 0xA0 : 0x80),
            static_cast<unsigned char>(b == 0xED ? 0x9F : 0xBF), char32_t(b & 0x0F)};
  if (b >= 0xF0 && b <= 0xF4)
    return {3, static_cast<unsigned char>(b == 0xF0 ? 0x90 : 0x80),
            static_cast<unsigned char>(b == 0xF4 ? 0x8F : 0xBF), char32_t(b & 0x07)};
  return {-1, 0, 0, 0};  // 80-C1 and F5-FF start nothing
}

template <class R>
bool in_ranges(std::span<const R> ranges, char32_t c) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                                   [](char32_t v, const R& r) { return v < r.first; });
  return it != ranges.begin() && c <= std::prev(it)->last;
}

// Hangul syllables decompose and compose by arithmetic (Unicode ch. 3.12), not by table.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Below U+0300 every code point is a starter that NFC leaves alone and no two of them
// compose (gen_unicode_tables.py asserts both), so such text is its own NFC.
constexpr char32_t kFirstNormalizationRelevant = 0x300;

std::uint8_t combining_class(char32_t c) {
  if (c < kFirstNormalizationRelevant) return 0;
  const auto& t = tables::kCombiningClass;
  const auto it = std::upper_bound(t.begin(), t.end(), c,
                                   [](char32_t v, const tables::ClassRange& r) { return v < r.first; });
  if (it == t.begin() || c > std::prev(it)->last) return 0;
  return std::prev(it)->ccc;
}

struct Mark {
  char32_t c;
  std::uint8_t ccc;
};

void decompose(char32_t c, std::vector<Mark>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back({kLBase + s / kNCount, 0});
    out.push_back({kVBase + (s % kNCount) / kTCount, 0});
    if (s % kTCount != 0) out.push_back({kTBase + s % kTCount, 0});
    return;
  }
  const auto& t = tables::kDecomposition;
  const auto it = std::lower_bound(t.begin(), t.end(), c,
                                   [](const tables::Decomposition& d, char32_t v) { return d.from < v; });
  if (it == t.end() || it->from != c) {
    out.push_back({c, combining_class(c)});
    return;
  }
  // Single steps in the table: either part may decompose further (U+1E08 -> U+00C7 U+0301).
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of first + second, or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto& t = tables::kComposition;
  const auto it = std::lower_bound(t.begin(), t.end(), std::pair{first, second},
                                   [](const tables::Composition& p, std::pair<char32_t, char32_t> v) {
                                     return std::pair{p.first, p.second} < v;
                                   });
  if (it == t.end() || it->first != first || it->second != second) return 0;
  return it->composite;
}

}  // namespace

char32_t next_utf8(std::string_view bytes, std::size_t& at) {
  const auto b = static_cast<unsigned char>(bytes[at++]);
  const Lead l = lead(b);
  if (l.needed == 0) return b;
  if (l.needed < 0) return kReplacement;
  char32_t cp = l.bits;
  unsigned char lower = l.lower, upper = l.upper;
  for (int seen = 0; seen < l.needed; ++seen) {
    // A byte out of range ends a maximal subpart: one U+FFFD, and that byte starts afresh.
    if (at == bytes.size()) return kReplacement;  // cut short by the end
    const auto c = static_cast<unsigned char>(bytes[at]);
    if (c < lower || c > upper) return kReplacement;
    lower = 0x80, upper = 0xBF;
    cp = (cp << 6) | (c & 0x3F);
    ++at;
  }
  return cp;
}

std::u32string decode_utf8(std::string_view bytes) {
  std::u32string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) out.push_back(next_utf8(bytes, i));
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) append_utf8(out, c);
  return out;
}

std::size_t complete_utf8_prefix(std::string_view bytes) {
  // A lead byte always starts a sequence (mid-sequence, it ends the one in hand as ill-formed
  // and is read again), so only the last lead byte within 3 of the end can be unfinished.
  const std::size_t n = bytes.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const std::size_t start = n - back;
    const auto b = static_cast<unsigned char>(bytes[start]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: its lead is further back
    const Lead l = lead(b);
    if (l.needed <= 0 || static_cast<std::size_t>(l.needed) <= back - 1) return n;  // complete
    // Unfinished; it is held only if what has arrived could still become a character.
    if (back >= 2) {
      const auto second = static_cast<unsigned char>(bytes[start + 1]);
      if (second < l.lower || second > l.upper) return n;
    }
    return start;
  }
  return n;
}

bool is_letter(char32_t c) { return in_ranges(tables::kLetter, c); }
bool is_number(char32_t c) { return in_ranges(tables::kNumber, c); }
bool is_space(char32_t c) { return in_ranges(tables::kSpace, c); }

std::u32string nfc(std::u32string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char32_t c) { return c < kFirstNormalizationRelevant; }))
    return std::u32string(text);

  std::vector<Mark> d;
  d.reserve(text.size() + text.size() / 2);
  for (const char32_t c : text) decompose(c, d);

  // Canonical ordering: only within a run of non-starters, stably (equal classes keep order).
  for (std::size_t i = 0; i < d.size();) {
    if (d[i].ccc == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < d.size() && d[j].ccc != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](const Mark& a, const Mark& b) { return a.ccc < b.ccc; });
    i = j;
  }

  std::u32string out;
  out.reserve(d.size());
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::size_t starter = kNone;  // index in out of the last starter
  std::uint8_t last_ccc = 0;    // class of the last character appended to out
  for (const Mark& m : d) {
    if (starter != kNone) {
      // Unblocked: nothing appended since the starter, or everything since has a lower
      // class than m (classes after the starter are ascending, so the last one decides).
      const bool adjacent = starter + 1 == out.size();
      if (adjacent || (last_ccc != 0 && last_ccc < m.ccc)) {
        if (const char32_t composite = compose(out[starter], m.c); composite != 0) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (m.ccc == 0) starter = out.size();
    out.push_back(m.c);
    last_ccc = m.ccc;
  }
  return out;
}

}  // namespace infer::unicode
