// infer — running a tokenizer.json (tokenizer_json.hpp): added tokens, normalizer,
// pre-tokenizer and BPE for encode; the decoder for decode.
#include "tokenizer_json.hpp"

#include <algorithm>
#include <cctype>
#include <queue>
#include <stdexcept>
#include <utility>

#include "tokenizer_json_impl.hpp"
#include "../common/unicode.hpp"

namespace infer {

namespace {

using Impl = TokenizerJson::Impl;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  out.reserve(s.size());
  std::size_t at = 0;
  for (std::size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) {
    out.append(s, at, hit - at);
    out += to;
  }
  out.append(s, at, std::string::npos);
  s = std::move(out);
}

std::string normalized(const Impl& t, std::string s) {
  for (const Impl::Normalize& n : t.normalize) {
    switch (n.kind) {
      case Impl::Normalize::Kind::nfc:
        s = unicode::encode_utf8(unicode::nfc(unicode::decode_utf8(s)));
        break;
      case Impl::Normalize::Kind::prepend:
        if (!s.empty()) s = n.text + s;
        break;
      case Impl::Normalize::Kind::replace:
        replace_all(s, n.text, n.with);
        break;
    }
  }
  return s;
}

// The model on one word (UTF-8): its tokens appended to `out`.
void encode_word(const Impl& t, std::string_view word, std::vector<int>& out) {
  std::vector<int> symbols;
  if (t.byte_level) {
    std::string mapped;
    for (const char c : word) mapped += byte_char(static_cast<unsigned char>(c));
    if (t.ignore_merges)
      if (const auto it = t.ids.find(mapped); it != t.ids.end()) {
        out.push_back(it->second);
        return;
      }
    for (const char c : word) symbols.push_back(t.byte_token[static_cast<unsigned char>(c)]);
  } else {
    if (t.ignore_merges)
      if (const auto it = t.ids.find(std::string(word)); it != t.ids.end()) {
        out.push_back(it->second);
        return;
      }
    bool last_unk = false;
    for (std::size_t i = 0; i < word.size();) {
      std::size_t n = 1;  // the word is well-formed UTF-8 (encode made it so)
      const auto lead = static_cast<unsigned char>(word[i]);
      if (lead >= 0xF0) n = 4;
      else if (lead >= 0xE0) n = 3;
      else if (lead >= 0xC0) n = 2;
      const std::string ch(word.substr(i, n));
      i += n;
      if (const auto it = t.ids.find(ch); it != t.ids.end()) {
        symbols.push_back(it->second);
        last_unk = false;
      } else if (t.byte_fallback) {
        for (const char b : ch) symbols.push_back(t.byte_token[static_cast<unsigned char>(b)]);
        last_unk = false;
      } else {
        if (!(t.fuse_unk && last_unk)) symbols.push_back(*t.unk);
        last_unk = true;
      }
    }
  }
  t.merges.apply(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

// llama.cpp's SentencePiece merge (tokenizer_json_impl.hpp) of well-formed UTF-8 `s`: each
// character a symbol; the adjacent pair whose joined text is a token of the highest score
// (the leftmost of equals) joins, until no pair is a token.
void encode_spm(const Impl& t, const std::string& s, std::vector<int>& out) {
  struct Symbol {
    int prev, next;
    std::size_t at, n;  // its bytes in s; n = 0 once joined into the one before it
  };
  std::vector<Symbol> sym;
  for (std::size_t at = 0; at < s.size();) {
    const auto lead = static_cast<unsigned char>(s[at]);
    const std::size_t n = std::min<std::size_t>(lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1, s.size() - at);
    const int i = static_cast<int>(sym.size());
    sym.push_back({i - 1, at + n == s.size() ? -1 : i + 1, at, n});
    at += n;
  }
  struct Pair {
    float score;
    int left, right;
    std::size_t n;  // the joined bytes when it was found (a stale pair no longer matches)
  };
  auto lower = [](const Pair& a, const Pair& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
  std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> pairs(lower);
  auto consider = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::size_t n = sym[static_cast<std::size_t>(l)].n + sym[static_cast<std::size_t>(r)].n;
    const auto it = t.ids.find(s.substr(sym[static_cast<std::size_t>(l)].at, n));
    if (it != t.ids.end()) pairs.push({t.scores[static_cast<std::size_t>(it->second)], l, r, n});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) consider(i - 1, i);
  while (!pairs.empty()) {
    const Pair p = pairs.top();
    pairs.pop();
    Symbol& l = sym[static_cast<std::size_t>(p.left)];
    Symbol& r = sym[static_cast<std::size_t>(p.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != p.n) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<std::size_t>(r.next)].prev = p.left;
    consider(l.prev, p.left);
    consider(p.left, l.next);
  }
  for (int i = sym.empty() ? -1 : 0; i != -1; i = sym[static_cast<std::size_t>(i)].next) {
    const Symbol& x = sym[static_cast<std::size_t>(i)];
    if (const auto it = t.ids.find(s.substr(x.at, x.n)); it != t.ids.end()) {
      out.push_back(it->second);
    } else {
      for (std::size_t k = 0; k < x.n; ++k) out.push_back(t.byte_token[static_cast<unsigned char>(s[x.at + k])]);
    }
  }
}

// The words the pre-tokenizer's Splits make of normalized text `s`, in order (`s` itself
// without a Split).
std::vector<std::string> pre_tokenized(const Impl& t, const std::string& s) {
  std::vector<std::string> words{s};
  for (const Impl::Split& split : t.splits) {
    std::vector<std::string> next;
    for (const std::string& w : words) {
      if (split.regex) {
        const std::u32string chars = unicode::decode_utf8(w);
        for (const auto& [b, e] : split_words(chars, *split.regex, t.spaces))
          next.push_back(unicode::encode_utf8(std::u32string_view(chars).substr(b, e - b)));
      } else {
        for (const auto& [b, e] : split_literal(w, split.literal, split.behavior, split.invert)) next.push_back(w.substr(b, e - b));
      }
    }
    words = std::move(next);
  }
  return words;
}

// A stretch of text between added tokens; `after_added`: it opens the input or follows one.
void encode_text(const Impl& t, std::string_view text, bool after_added, std::vector<int>& out) {
  if (t.spm) {
    if (text.empty()) return;
    std::string s = t.space_prefix && after_added ? " " : "";
    s += text;
    replace_all(s, " ", "\u2581");
    encode_spm(t, s, out);
    return;
  }
  const std::string s = normalized(t, std::string(text));
  if (s.empty()) return;
  for (const std::string& word : pre_tokenized(t, s)) encode_word(t, word, out);
}

// A <0xNN> piece of a byte-fallback vocabulary.
bool byte_fallback_piece(const Impl& t, int id) {
  const std::string& p = t.pieces[static_cast<std::size_t>(id)];
  if (!t.byte_fallback || p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>' || !std::isxdigit(static_cast<unsigned char>(p[3])) ||
      !std::isxdigit(static_cast<unsigned char>(p[4])))
    return false;
  const int b = std::stoi(p.substr(3, 2), nullptr, 16);
  return t.byte_token[static_cast<std::size_t>(b)] == id;
}

// The decoder's text of `ids` before Strip and the clean-up of spaces. Two runs of ids
// make the text of both joined when the first ends outside a byte run and a character.
// `first`: ids[0] is the first id of the whole text (llama.cpp's SentencePiece strips its space).
std::string raw_text(const Impl& t, std::span<const int> ids, bool skip_special, bool first) {
  std::string out, bytes;  // bytes: byte-level characters or <0xNN> pieces not yet made text
  auto flush = [&] {
    if (bytes.empty()) return;
    if (t.byte_level || t.spm) {
      out += unicode::encode_utf8(unicode::decode_utf8(bytes));  // lossy, as the library's (llama.cpp: as node reads its bytes)
    } else {  // ByteFallback: the run's bytes if they are UTF-8, else one U+FFFD per byte
      if (unicode::encode_utf8(unicode::decode_utf8(bytes)) == bytes) out += bytes;
      else
        for (std::size_t i = 0; i < bytes.size(); ++i) out += "\uFFFD";
    }
    bytes.clear();
  };
  for (const int id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= t.pieces.size() || !t.present[static_cast<std::size_t>(id)])
      throw std::out_of_range("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary");
    const auto u = static_cast<std::size_t>(id);
    const bool strip = t.spm && t.space_prefix && first;  // llama.cpp: one space off the first token's text
    first = false;
    if (skip_special && t.is_special[u]) continue;
    const std::string& p = t.pieces[u];
    if (t.byte_level) {
      if (t.is_special[u] || t.is_added[u]) {
        flush();
        out += p;
      } else {
        for (const char32_t c : unicode::decode_utf8(p)) bytes += static_cast<char>(char_byte(c));
      }
      continue;
    }
    if (byte_fallback_piece(t, id)) {
      const char b = static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16));
      if (!(strip && b == ' ')) bytes += b;
      continue;
    }
    flush();
    std::string piece = p;
    if (!(t.spm && t.is_added[u])) replace_all(piece, "\u2581", " ");  // llama.cpp: added tokens verbatim
    if (strip && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    out += piece;
  }
  flush();
  return out;
}

// The clean-up of spaces before punctuation and contractions decode was loaded with.
void clean_up_spaces(const Impl& t, std::string& out) {
  if (t.clean_up == TokenizerJson::CleanUp::none) return;
  for (const auto& [from, to] : {std::pair{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
                                 {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}})
    if (t.clean_up == TokenizerJson::CleanUp::transformers || std::string_view(from) != " n't") replace_all(out, from, to);
}

}  // namespace

TokenizerJson::TokenizerJson(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenizerJson::TokenizerJson(TokenizerJson&&) noexcept = default;
TokenizerJson& TokenizerJson::operator=(TokenizerJson&&) noexcept = default;
TokenizerJson::~TokenizerJson() = default;

std::vector<int> TokenizerJson::encode(std::string_view raw, bool add_special) const {
  const Impl& t = *impl_;
  // As a JavaScript string holds it: ill-formed UTF-8 replaced by U+FFFD.
  const std::string text = unicode::encode_utf8(unicode::decode_utf8(raw));
  std::vector<int> out;
  if (add_special) out = t.prefix;
  std::size_t start = 0;  // of the text not yet encoded
  bool after_added = true;
  for (std::size_t i = 0; i < text.size();) {
    const auto [id, length] = t.added.empty() ? std::pair<int, std::size_t>{-1, 0} : t.added.longest_at(text, i);
    if (id < 0) {
      ++i;
      continue;
    }
    if (i > start) encode_text(t, std::string_view(text).substr(start, i - start), after_added, out);
    out.push_back(id);
    after_added = true;
    i += length;
    start = i;
  }
  if (text.size() > start) encode_text(t, std::string_view(text).substr(start), after_added, out);
  if (add_special) out.insert(out.end(), t.suffix.begin(), t.suffix.end());
  return out;
}

std::string TokenizerJson::decode(std::span<const int> ids, bool skip_special) const {
  std::string out = raw_text(*impl_, ids, skip_special, true);
  if (!impl_->byte_level)
    for (int k = 0; k < impl_->strip_start && !out.empty() && out[0] == ' '; ++k) out.erase(0, 1);
  clean_up_spaces(*impl_, out);
  return out;
}

TokenizerJson::Stream TokenizerJson::stream(bool skip_special) const { return Stream(*impl_, skip_special); }

std::string TokenizerJson::Stream::next(int id) {
  const Impl& t = *t_;
  if (id < 0 || static_cast<std::size_t>(id) >= t.pieces.size() || !t.present[static_cast<std::size_t>(id)])
    throw std::out_of_range("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary");
  pending_.push_back(id);
  // A byte-fallback run stays open past a byte and a skipped special token: its bytes are
  // text only as a whole (one U+FFFD per byte if they are not UTF-8).
  if (!t.byte_level && (byte_fallback_piece(t, id) || (skip_ && t.is_special[static_cast<std::size_t>(id)]))) return "";
  std::string raw = raw_text(t, pending_, skip_, fresh_);
  // Byte-level: bytes that end inside a character decode to U+FFFD until the rest come (a
  // real U+FFFD at the end is held one token longer, no more).
  if (t.byte_level && raw.ends_with("\uFFFD")) return "";
  pending_.clear();
  fresh_ = false;
  append(std::move(raw));
  return take(false);
}

std::string TokenizerJson::Stream::finish() {
  if (!pending_.empty()) {
    append(raw_text(*t_, pending_, skip_, fresh_));
    pending_.clear();
    fresh_ = false;
  }
  return take(true);
}

void TokenizerJson::Stream::append(std::string raw) {
  if (!started_ && !t_->byte_level) {  // the decoder's Strip(" ", n, 0): the first n spaces of the whole text
    std::size_t k = 0;
    for (; k < raw.size() && raw[k] == ' ' && stripped_ < t_->strip_start; ++k) ++stripped_;
    raw.erase(0, k);
  }
  if (!raw.empty()) started_ = true;
  tail_ += raw;
}

std::string TokenizerJson::Stream::take(bool all) {
  std::size_t cut = tail_.size();
  if (t_->clean_up != CleanUp::none && !all) {
    // Every clean-up pattern begins with a space, and " ' " also ends with one: the text
    // before a space that follows neither a space nor a quote is cleaned as it will be in
    // the whole text, whatever comes after.
    cut = 0;
    for (std::size_t s = tail_.size(); s-- > 1;)
      // (nor " n": after " ' " lost its spaces, " n" and "'t" would join into " n't")
      if (tail_[s] == ' ' && tail_[s - 1] != ' ' && tail_[s - 1] != '\'' && !(s >= 2 && tail_[s - 1] == 'n' && tail_[s - 2] == ' ')) {
        cut = s;
        break;
      }
  }
  std::string out = tail_.substr(0, cut);
  tail_.erase(0, cut);
  clean_up_spaces(*t_, out);
  return out;
}

const std::vector<int>& TokenizerJson::opening() const { return impl_->prefix; }

TokenizerJson::CleanUp TokenizerJson::clean_up() const { return impl_->clean_up; }

std::int64_t TokenizerJson::vocab() const { return static_cast<std::int64_t>(impl_->pieces.size()); }

bool TokenizerJson::has(int id) const { return id >= 0 && static_cast<std::size_t>(id) < impl_->pieces.size() && impl_->present[static_cast<std::size_t>(id)]; }

const std::string& TokenizerJson::piece(int id) const {
  if (!has(id)) throw std::out_of_range("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary");
  return impl_->pieces[static_cast<std::size_t>(id)];
}

std::optional<int> TokenizerJson::id_of(std::string_view piece) const {
  const auto it = impl_->ids.find(std::string(piece));
  return it == impl_->ids.end() ? std::nullopt : std::optional<int>(it->second);
}

bool TokenizerJson::special(int id) const { return has(id) && impl_->is_special[static_cast<std::size_t>(id)]; }

bool TokenizerJson::added(int id) const { return has(id) && impl_->is_added[static_cast<std::size_t>(id)]; }

bool TokenizerJson::byte_level() const { return impl_->byte_level; }

std::optional<std::string> TokenizerJson::text_bytes(int id) const {
  const Impl& t = *impl_;
  if (!has(id) || t.is_special[static_cast<std::size_t>(id)]) return std::nullopt;
  // As raw_text makes each.
  const std::string& p = t.pieces[static_cast<std::size_t>(id)];
  const bool added = t.is_added[static_cast<std::size_t>(id)];
  if (t.byte_level) {
    if (added) return p;
    std::string out;
    for (const char32_t c : unicode::decode_utf8(p)) out += static_cast<char>(char_byte(c));
    return out;
  }
  if (byte_fallback_piece(t, id)) return std::string(1, static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
  if (t.spm && added) return p;
  std::string out = p;
  replace_all(out, "\u2581", " ");
  return out;
}

std::uint64_t TokenizerJson::digest() const { return impl_->digest; }

}  // namespace infer
