// infer — the byte-level BPE pre-tokenizer patterns, matched by hand (pretokenize.hpp).
#include "pretokenize.hpp"

#include "../common/unicode.hpp"

namespace infer {

namespace {

constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool newline(char32_t c) { return c == U'\r' || c == U'\n'; }

// `c` equals the ASCII lower-case letter `lower` under JavaScript's simple case folding.
bool folds_to(char32_t c, char lower) {
  if (c == static_cast<char32_t>(lower) || c == static_cast<char32_t>(lower - 'a' + 'A')) return true;
  return lower == 's' && c == U'\u017F';
}

class Matcher {
 public:
  Matcher(std::u32string_view t, SplitPattern p, Spaces s)
      : t_(t), max_digits_(p == SplitPattern::llama3 ? 3 : 1), unicode_spaces_(s == Spaces::unicode) {}

  // The end of the word that starts at `i` (> i).
  std::size_t word_end(std::size_t i) const {
    if (std::size_t e = contraction(i)) return e;
    if (std::size_t e = letters(i)) return e;
    if (unicode::is_number(t_[i])) {
      std::size_t e = i;
      while (e < t_.size() && e - i < max_digits_ && unicode::is_number(t_[e])) ++e;
      return e;
    }
    if (std::size_t e = symbols(i)) return e;
    // Only spaces are left: \s*[\r\n]+, then \s+(?!\S), then \s+.
    std::size_t run = i;
    while (run < t_.size() && space(t_[run])) ++run;
    for (std::size_t k = run; k > i; --k)
      if (newline(t_[k - 1])) return k;  // \s* gives back up to the last line break of the run
    if (run == t_.size() || run - i == 1) return run;  // at the end, or one space before a non-space
    return run - 1;  // leave the last space to the word it precedes
  }

 private:
  bool space(char32_t c) const {
    if (unicode_spaces_ && (c == U'\uFEFF' || c == U'\u0085')) return c == U'\u0085';
    return unicode::is_space(c);
  }
  bool other(char32_t c) const { return !space(c) && !unicode::is_letter(c) && !unicode::is_number(c); }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  std::size_t contraction(std::size_t i) const {
    if (t_[i] != U'\'' || i + 1 >= t_.size()) return 0;
    const char32_t a = t_[i + 1];
    const char32_t b = i + 2 < t_.size() ? t_[i + 2] : 0;
    if (folds_to(a, 's') || folds_to(a, 't')) return i + 2;
    if ((folds_to(a, 'r') || folds_to(a, 'v')) && folds_to(b, 'e')) return i + 3;
    if (folds_to(a, 'm')) return i + 2;
    if (folds_to(a, 'l') && folds_to(b, 'l')) return i + 3;
    if (folds_to(a, 'd')) return i + 2;
    return 0;
  }

  // [^\r\n\p{L}\p{N}]?\p{L}+
  std::size_t letters(std::size_t i) const {
    std::size_t s = i;
    if (!unicode::is_letter(t_[s])) {
      if (newline(t_[s]) || unicode::is_number(t_[s]) || s + 1 >= t_.size() || !unicode::is_letter(t_[s + 1])) return 0;
      ++s;
    }
    while (s < t_.size() && unicode::is_letter(t_[s])) ++s;
    return s;
  }

  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  std::size_t symbols(std::size_t i) const {
    std::size_t s = i;
    if (t_[s] == U' ' && s + 1 < t_.size() && other(t_[s + 1])) ++s;
    if (!other(t_[s])) return 0;
    while (s < t_.size() && other(t_[s])) ++s;
    while (s < t_.size() && newline(t_[s])) ++s;
    return s;
  }

  std::u32string_view t_;
  std::size_t max_digits_;
  bool unicode_spaces_;
};

}  // namespace

std::optional<SplitPattern> split_pattern(std::string_view regex) {
  if (regex == kLlama3) return SplitPattern::llama3;
  if (regex == kQwen2) return SplitPattern::qwen2;
  return std::nullopt;
}

std::string_view split_regex(SplitPattern p) { return p == SplitPattern::llama3 ? kLlama3 : kQwen2; }

std::vector<std::pair<std::size_t, std::size_t>> split_words(std::u32string_view text, SplitPattern p, Spaces spaces) {
  const Matcher m(text, p, spaces);
  std::vector<std::pair<std::size_t, std::size_t>> words;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t e = m.word_end(i);
    words.emplace_back(i, e);
    i = e;
  }
  return words;
}

}  // namespace infer
