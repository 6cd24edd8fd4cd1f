// infer — finding a tokenizer's added tokens in a text: at a position, the longest added
// token that starts there (encode takes the leftmost position that has one: the library's
// leftmost-longest match, and transformers.js's DictionarySplitter).
//
// A byte trie, so one position costs at most the longest token's length in steps whatever
// the number of tokens: Gemma 3 has 6415 added tokens (6242 of them <unusedN>), which a scan
// of the list at every position of a text made 6415 comparisons per byte. Its nodes number
// at most the added tokens' bytes, which the file's size bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace infer {

class AddedTokenTrie {
 public:
  // `text` (not empty) is the token `id` (>= 0); a text added twice keeps its first id.
  void add(std::string_view text, int id);
  // The id and length of the longest text added that starts at text[at], or {-1, 0}.
  std::pair<int, std::size_t> longest_at(std::string_view text, std::size_t at) const;
  bool empty() const { return nodes_.size() == 1; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::uint32_t>> next;  // by byte, in the order added
    int id = -1;
  };
  std::uint32_t child(std::uint32_t node, unsigned char byte) const;  // 0: none (the root is no one's child)
  std::vector<Node> nodes_{1};
};

}  // namespace infer
