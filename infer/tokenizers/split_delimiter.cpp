// infer — the Split pre-tokenizer on a literal pattern (split_delimiter.hpp).
#include "split_delimiter.hpp"

#include <algorithm>

namespace infer {

namespace {

struct Piece {
  std::size_t begin, end;
  bool match;
};

// The library's find_matches: the text as matches of `pattern` and the text between them,
// tiling it (one non-match piece for a text without a match, none for an empty text).
std::vector<Piece> find_matches(std::string_view text, std::string_view pattern, bool invert) {
  std::vector<Piece> pieces;
  std::size_t prev = 0;
  for (std::size_t at; (at = text.find(pattern, prev)) != std::string_view::npos; prev = at + pattern.size()) {
    if (at != prev) pieces.push_back({prev, at, invert});
    pieces.push_back({at, at + pattern.size(), !invert});
  }
  if (prev != text.size()) pieces.push_back({prev, text.size(), invert});
  return pieces;
}

// MergedWithPrevious over `pieces` in order (MergedWithNext: over them reversed, extending
// the other end): a match joins the piece kept last unless the piece before it was a match.
void merge_matches(const std::vector<Piece>& pieces, bool backwards, std::vector<Piece>& out) {
  bool previous_match = false;
  auto step = [&](const Piece& p) {
    if (p.match && !previous_match && !out.empty()) {
      (backwards ? out.back().begin : out.back().end) = backwards ? p.begin : p.end;
    } else {
      out.push_back(p);
    }
    previous_match = p.match;
  };
  if (backwards) {
    std::for_each(pieces.rbegin(), pieces.rend(), step);
    std::reverse(out.begin(), out.end());
  } else {
    std::for_each(pieces.begin(), pieces.end(), step);
  }
}

}  // namespace

std::optional<SplitBehavior> split_behavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  return std::nullopt;
}

std::vector<std::pair<std::size_t, std::size_t>> split_literal(std::string_view text, std::string_view pattern,
                                                               SplitBehavior behavior, bool invert) {
  const std::vector<Piece> pieces = find_matches(text, pattern, invert);
  std::vector<Piece> kept;
  switch (behavior) {
    case SplitBehavior::removed:
      for (const Piece& p : pieces)
        if (!p.match) kept.push_back(p);
      break;
    case SplitBehavior::isolated:
      kept = pieces;
      break;
    case SplitBehavior::merged_with_previous:
    case SplitBehavior::merged_with_next:
      merge_matches(pieces, behavior == SplitBehavior::merged_with_next, kept);
      break;
    case SplitBehavior::contiguous: {
      bool previous_match = false;  // as the library starts it: a first match is a piece of its own
      for (const Piece& p : pieces) {
        if (p.match == previous_match && !kept.empty()) kept.back().end = p.end;
        else kept.push_back(p);
        previous_match = p.match;
      }
      break;
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const Piece& p : kept)
    if (p.end > p.begin) out.emplace_back(p.begin, p.end);
  return out;
}

}  // namespace infer
