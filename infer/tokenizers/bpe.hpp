// infer — byte-pair encoding by merge rank, the "BPE" model of tokenizer.json (and of GGUF's
// "gpt2"-style vocabularies): a word starts as one symbol per character (or per byte), and
// the adjacent pair whose merge comes first in the merge list is joined, again and again,
// until no adjacent pair has a merge. Of equal ranks the leftmost pair goes first, as in
// Hugging Face tokenizers' BPE::merge_word. It runs on a heap over the pairs: O(n log n) for
// a word of n symbols, so a Llama 2 text (no pre-tokenizer: the whole text is one word)
// costs no more than a pre-tokenized one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace infer {

class BpeMerges {
 public:
  // Merge `rank` joins tokens `left` and `right` into `merged` (ids into one vocabulary).
  // A pair listed twice keeps its first (lowest) rank, as the library's map does.
  void add(int left, int right, int merged, int rank);
  void reserve(std::size_t n) { merges_.reserve(n); }
  std::size_t size() const { return merges_.size(); }

  // Merges `symbols` (token ids) in place until no adjacent pair has a merge.
  void apply(std::vector<int>& symbols) const;

 private:
  struct Merge {
    int rank;
    int merged;
  };
  static std::uint64_t key(int left, int right) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32 | static_cast<std::uint32_t>(right);
  }
  const Merge* find(int left, int right) const;
  std::unordered_map<std::uint64_t, Merge> merges_;
};

// GPT-2's reversible byte-to-character map of byte-level BPE: bytes that are printable
// Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves, the other 68 for U+0100..
// in byte order. byte_char(b) is that character's UTF-8; char_byte() inverts it (-1: none).
const std::string& byte_char(unsigned char b);
int char_byte(char32_t c);

}  // namespace infer
