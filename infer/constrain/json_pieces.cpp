// infer — JSON's lexical pieces as grammar fragments (json_pieces.hpp).
#include "json_pieces.hpp"

#include <algorithm>

namespace infer::constrain {

namespace {

constexpr std::uint64_t kCharacterStates = 22;  // a character position: itself and 21 inner states

void hex(GrammarBuilder& b, std::uint32_t from, std::uint32_t to) {
  b.bytes(from, '0', '9', to);
  b.bytes(from, 'A', 'F', to);
  b.bytes(from, 'a', 'f', to);
}

}  // namespace

std::uint32_t JsonPieces::ws(std::uint32_t target) {
  // w[0] is the head; w[i] has seen i whitespace bytes; each may go on as `target`.
  std::uint32_t w[kMaxWhitespace + 1];
  for (std::uint32_t& n : w) n = b_.node();
  for (int i = 0; i <= kMaxWhitespace; ++i) {
    b_.eps(w[i], target);
    if (i == kMaxWhitespace) break;
    for (const char c : {' ', '\t', '\n', '\r'}) b_.byte(w[i], c, w[i + 1]);
  }
  return w[0];
}

void JsonPieces::literal(std::uint32_t from, const std::string& text, std::uint32_t to) { literals(from, {text}, to); }

void JsonPieces::literals(std::uint32_t from, const std::vector<std::string>& texts, std::uint32_t to) {
  std::map<std::pair<std::uint32_t, unsigned char>, std::uint32_t> child;  // the trie's edges
  std::vector<std::uint32_t> ends;
  for (const std::string& t : texts) {
    std::uint32_t at = from;
    for (const char c : t) {
      auto [it, fresh] = child.try_emplace({at, static_cast<unsigned char>(c)}, 0);
      if (fresh) {
        it->second = b_.node();
        b_.byte(at, c, it->second);
      }
      at = it->second;
    }
    ends.push_back(at);
  }
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  for (const std::uint32_t e : ends) b_.eps(e, to);
}

void JsonPieces::character(std::uint32_t a, std::uint32_t to) {
  auto n = [&] { return b_.node(); };
  b_.bytes(a, 0x20, 0x21, to);  // not '"' (0x22), not '\\' (0x5C), never below 0x20
  b_.bytes(a, 0x23, 0x5B, to);
  b_.bytes(a, 0x5D, 0x7F, to);
  // Well-formed UTF-8 (Unicode's table 3-7): t<k> still needs k continuation bytes.
  const std::uint32_t t1 = n(), t2 = n(), t3 = n(), e0 = n(), ed = n(), f0 = n(), f4 = n();
  b_.bytes(t1, 0x80, 0xBF, to);
  b_.bytes(t2, 0x80, 0xBF, t1);
  b_.bytes(t3, 0x80, 0xBF, t2);
  b_.bytes(a, 0xC2, 0xDF, t1);
  b_.bytes(a, 0xE0, 0xE0, e0);
  b_.bytes(e0, 0xA0, 0xBF, t1);
  b_.bytes(a, 0xE1, 0xEC, t2);
  b_.bytes(a, 0xED, 0xED, ed);
  b_.bytes(ed, 0x80, 0x9F, t1);  // no surrogates
  b_.bytes(a, 0xEE, 0xEF, t2);
  b_.bytes(a, 0xF0, 0xF0, f0);
  b_.bytes(f0, 0x90, 0xBF, t2);
  b_.bytes(a, 0xF1, 0xF3, t3);
  b_.bytes(a, 0xF4, 0xF4, f4);
  b_.bytes(f4, 0x80, 0x8F, t2);
  // Escapes: u<k> has seen k hex digits of a \u that is no surrogate; ud the 'D' that may
  // begin one; h<k> k digits of a high surrogate; l<k> the low one that must follow it.
  const std::uint32_t esc = n(), u0 = n(), u1 = n(), u2 = n(), u3 = n(), ud = n(), h2 = n(), h3 = n();
  const std::uint32_t l0 = n(), l1 = n(), l2 = n(), l3 = n(), l4 = n(), l5 = n();
  b_.byte(a, '\\', esc);
  for (const char c : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) b_.byte(esc, c, to);
  b_.byte(esc, 'u', u0);
  b_.bytes(u0, '0', '9', u1);
  b_.bytes(u0, 'A', 'C', u1);
  b_.bytes(u0, 'E', 'F', u1);
  b_.bytes(u0, 'a', 'c', u1);
  b_.bytes(u0, 'e', 'f', u1);
  b_.byte(u0, 'D', ud);
  b_.byte(u0, 'd', ud);
  hex(b_, u1, u2);
  hex(b_, u2, u3);
  hex(b_, u3, to);
  b_.bytes(ud, '0', '7', u2);
  for (const char c : {'8', '9', 'A', 'B', 'a', 'b'}) b_.byte(ud, c, h2);
  hex(b_, h2, h3);
  hex(b_, h3, l0);
  b_.byte(l0, '\\', l1);
  b_.byte(l1, 'u', l2);
  b_.byte(l2, 'D', l3);
  b_.byte(l2, 'd', l3);
  b_.bytes(l3, 'C', 'F', l4);
  b_.bytes(l3, 'c', 'f', l4);
  hex(b_, l4, l5);
  hex(b_, l5, to);
}

std::uint64_t JsonPieces::string_states(std::uint32_t min, std::uint32_t max) {
  const std::uint64_t positions = max == kUnbounded ? std::uint64_t{min} + 1 : std::uint64_t{max} + 1;
  return positions * kCharacterStates + 2;
}

std::uint32_t JsonPieces::string_rule(std::uint32_t min, std::uint32_t max) {
  if (const auto it = strings_.find({min, max}); it != strings_.end()) return it->second;
  const std::uint32_t entry = b_.node(), fin = b_.node();
  b_.end(fin);
  // p[i]: i characters so far. Without a maximum, the last position loops.
  const std::uint32_t last = max == kUnbounded ? min : max;
  std::uint32_t at = b_.node();
  b_.byte(entry, '"', at);
  for (std::uint32_t i = 0;; ++i) {
    if (i >= min) b_.byte(at, '"', fin);
    if (i == last) {
      if (max == kUnbounded) character(at, at);
      break;
    }
    const std::uint32_t next = b_.node();
    character(at, next);
    at = next;
  }
  strings_.emplace(std::pair(min, max), entry);
  return entry;
}

std::uint32_t JsonPieces::number_rule(bool fraction) {
  // -?(0|[1-9][0-9]*) with bounded digits, then for a number (.[0-9]+)?([eE][+-]?[0-9]+)?
  const std::uint32_t entry = b_.node(), sign = b_.node(), fin = b_.node();
  b_.end(fin);
  std::vector<std::uint32_t> whole;  // where the integer part may end
  b_.byte(entry, '-', sign);
  const std::uint32_t zero = b_.node();
  b_.byte(entry, '0', zero);
  b_.byte(sign, '0', zero);
  whole.push_back(zero);
  std::uint32_t d = b_.node();
  b_.bytes(entry, '1', '9', d);
  b_.bytes(sign, '1', '9', d);
  whole.push_back(d);
  for (int i = 1; i < kMaxIntegerDigits; ++i) {
    const std::uint32_t next = b_.node();
    b_.bytes(d, '0', '9', next);
    whole.push_back(d = next);
  }
  for (const std::uint32_t w : whole) b_.eps(w, fin);
  if (!fraction) return entry;
  const std::uint32_t point = b_.node(), e = b_.node(), esign = b_.node();
  for (const std::uint32_t w : whole) {
    b_.byte(w, '.', point);
    b_.byte(w, 'e', e);
    b_.byte(w, 'E', e);
  }
  std::uint32_t f = point;
  for (int i = 0; i < kMaxFractionDigits; ++i) {
    const std::uint32_t next = b_.node();
    b_.bytes(f, '0', '9', next);
    f = next;
    b_.eps(f, fin);
    b_.byte(f, 'e', e);
    b_.byte(f, 'E', e);
  }
  b_.byte(e, '+', esign);
  b_.byte(e, '-', esign);
  std::uint32_t x1 = b_.node();
  b_.bytes(e, '0', '9', x1);
  b_.bytes(esign, '0', '9', x1);
  b_.eps(x1, fin);
  for (int i = 1; i < kMaxExponentDigits; ++i) {
    const std::uint32_t next = b_.node();
    b_.bytes(x1, '0', '9', next);
    b_.eps(next, fin);
    x1 = next;
  }
  return entry;
}

std::uint32_t JsonPieces::value_rule() {
  if (value_ != kNever) return value_;
  const std::uint32_t entry = value_ = b_.node(), fin = b_.node();
  b_.end(fin);
  string(entry, 0, kUnbounded, fin);
  number(entry, fin);
  literals(entry, {"true", "false", "null"}, fin);
  any_object(entry, fin);
  any_array(entry, fin);
  return entry;
}

void JsonPieces::string(std::uint32_t from, std::uint32_t min, std::uint32_t max, std::uint32_t to) {
  b_.call(from, string_rule(min, max), to, 0);
}

void JsonPieces::number(std::uint32_t from, std::uint32_t to) {
  if (number_ == kNever) number_ = number_rule(true);
  b_.call(from, number_, to, 0);
}

void JsonPieces::integer(std::uint32_t from, std::uint32_t to) {
  if (integer_ == kNever) integer_ = number_rule(false);
  b_.call(from, integer_, to, 0);
}

void JsonPieces::any_value(std::uint32_t from, std::uint32_t to) { b_.call(from, value_rule(), to, 0); }

void JsonPieces::any_object(std::uint32_t from, std::uint32_t to) {
  // { ws ( key ws : ws value ws ( , ws key ws : ws value ws )* )? }   each value one level deeper
  const std::uint32_t open = b_.node(), key = b_.node(), colon = b_.node(), value = b_.node(), after = b_.node();
  b_.byte(from, '{', ws(open));
  b_.byte(open, '}', to);
  b_.eps(open, key);
  b_.call(key, string_rule(0, kUnbounded), ws(colon), 0);
  b_.byte(colon, ':', ws(value));
  b_.call(value, value_rule(), ws(after), 1);
  b_.byte(after, ',', ws(key));
  b_.byte(after, '}', to);
}

void JsonPieces::any_array(std::uint32_t from, std::uint32_t to) {
  const std::uint32_t open = b_.node(), item = b_.node(), after = b_.node();
  b_.byte(from, '[', ws(open));
  b_.byte(open, ']', to);
  b_.eps(open, item);
  b_.call(item, value_rule(), ws(after), 1);
  b_.byte(after, ',', ws(item));
  b_.byte(after, ']', to);
}

}  // namespace infer::constrain
