// infer — the Split pre-tokenizer on a literal pattern (tokenizer.json's "pattern":
// {"String": ...}), with the five delimiter behaviors of the tokenizers library
// (SplitDelimiterBehavior; Gemma 3 ships {"String": " "} with MergedWithPrevious).
//
// As the library does it (pre_tokenizers/split.rs, NormalizedString::split): the pattern
// is found left to right, matches never overlapping, and the text becomes pieces that tile
// it, each a match or the text between two; `invert` swaps which are matches. Then, on
// "The-final--countdown" split on "-":
//   Removed             The | final | countdown                    (the matches dropped)
//   Isolated            The | - | final | - | - | countdown
//   MergedWithPrevious  The- | final- | - | countdown              (a match joins the piece before
//                                                                   it, unless that one is a match)
//   MergedWithNext      The | -final | - | -countdown              (the same towards the next)
//   Contiguous          The | - | final | -- | countdown            (runs of matches, or of non-
//                                                                   matches, joined)
// and empty pieces are dropped. The pattern is bytes of well-formed UTF-8 matched in
// well-formed UTF-8, so every cut falls between two characters.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace infer {

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// The behavior tokenizer.json names ("Removed", "Isolated", "MergedWithPrevious",
// "MergedWithNext", "Contiguous"), or nullopt.
std::optional<SplitBehavior> split_behavior(std::string_view name);

// The pieces of `text` as [begin, end) byte offsets, in order; `pattern` must not be empty.
std::vector<std::pair<std::size_t, std::size_t>> split_literal(std::string_view text, std::string_view pattern,
                                                               SplitBehavior behavior, bool invert);

}  // namespace infer
