// infer — the pre-tokenizer regexes of the byte-level BPE tokenizers (tokenizer.json's
// "Split" pre-tokenizer), matched by hand instead of by a regex engine: the two patterns
// below are the ones Llama 3 and Qwen 2/3 ship, and a tokenizer.json with any other pattern is
// refused at load, naming it (tokenizer_json.cpp), never tokenized approximately.
//
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  the same with \p{N} for \p{N}{1,3} (one digit a word)
//
// At each position the first alternative that matches wins, each as long as its greedy
// quantifiers and their backtracking make it (a regex engine's leftmost-first rule); every
// character is a letter, a number, a space or something else, so some alternative always
// matches and the words tile the text ("Isolated": nothing between matches is lost).
// Character classes are JavaScript's (infer/common/unicode.hpp), as is the case folding of (?i:)
// (U+017F LATIN SMALL LETTER LONG S folds to 's').
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace infer {

enum class SplitPattern { llama3, qwen2 };

// The pattern a tokenizer.json "Regex" string is, or nullopt.
std::optional<SplitPattern> split_pattern(std::string_view regex);
// The source text of a pattern, as tokenizer.json writes it.
std::string_view split_regex(SplitPattern p);

// What \s is: JavaScript's (transformers.js; U+FEFF is a space, U+0085 is not) or Unicode's
// White_Space property (llama.cpp, and the tokenizers library's regex engine: the reverse).
enum class Spaces { javascript, unicode };

// The words of `text` as [begin, end) offsets into it, in order, tiling it.
std::vector<std::pair<std::size_t, std::size_t>> split_words(std::u32string_view text, SplitPattern p,
                                                             Spaces spaces = Spaces::javascript);

}  // namespace infer
