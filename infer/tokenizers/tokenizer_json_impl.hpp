// infer — what a loaded tokenizer.json is (tokenizer_json.hpp): filled and checked by
// tokenizer_json_load.cpp, run by tokenizer_json.cpp.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "added_tokens.hpp"
#include "bpe.hpp"
#include "pretokenize.hpp"
#include "split_delimiter.hpp"
#include "tokenizer_json.hpp"

namespace infer {

struct TokenizerJson::Impl {
  // One step of the normalizer, in the file's order.
  struct Normalize {
    enum class Kind { nfc, prepend, replace } kind;
    std::string text, with;  // prepend: text; replace: text -> with
  };
  // One Split of the pre-tokenizer, in the file's order: on the Llama 3 or Qwen regex
  // (Isolated, as their files have it; before ByteLevel), or on a literal (`regex` nullopt)
  // with any of the library's delimiter behaviors.
  struct Split {
    std::optional<SplitPattern> regex;
    std::string literal;
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
  };

  std::vector<std::string> pieces;  // by id; "" where no token has that id
  std::vector<std::uint8_t> present, is_special, is_added;  // by id
  std::unordered_map<std::string, int> ids;  // the model's vocabulary and the added tokens
  BpeMerges merges;

  std::vector<Normalize> normalize;
  std::vector<Split> splits;
  Spaces spaces = Spaces::javascript;
  bool byte_level = false;      // ByteLevel pre-tokenizer and decoder
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  std::optional<int> unk;
  std::array<int, 256> byte_token{};  // byte-level: the byte's character; fallback: <0xNN>; -1 none

  AddedTokenTrie added;  // found in the text before anything else, leftmost and longest
  std::vector<int> prefix, suffix;  // the post-processor's single sequence: prefix, text, suffix

  int strip_start = 0;  // the SentencePiece decoder's Strip(" ", n, 0)
  CleanUp clean_up = CleanUp::none;
  // A GGUF file's SentencePiece vocabulary ("llama" kind) as llama.cpp runs it (tokenizer_gguf.cpp
  // only: from_json with llama_cpp and its "llama_cpp_spm" object): a text is one word, " "
  // put before it where it opens the input or follows an added token (space_prefix), spaces
  // written as U+2581; then adjacent pieces merged by the joined token's score (highest
  // first, the leftmost of equals), leftover characters as their bytes' <0xNN> tokens.
  // Decode: added tokens verbatim (no U+2581 -> " "), byte runs as lossy UTF-8, and one
  // leading space off the first token's text (space_prefix).
  bool spm = false;
  bool space_prefix = false;
  std::vector<float> scores;  // by id
  std::uint64_t digest = 0;
};

}  // namespace infer
