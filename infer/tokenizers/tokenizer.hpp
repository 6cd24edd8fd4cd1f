// infer — llama2.c's tokenizer (its tokenizer.bin format, e.g. tok512.bin of stories260K):
// SentencePiece BPE pieces with merge scores, byte fallback <0x00>..<0xFF> at ids 3..258,
// BOS 1 and EOS 2, a real leading space where SentencePiece writes '▁'.
//
// encode() is llama2.c's: BOS, then a dummy-prefix " " (if the text is not empty), each
// UTF-8 character as its piece or as its bytes' fallback ids, then merges: repeatedly the
// adjacent pair whose joined piece has the highest score (the leftmost of equal scores)
// becomes that piece. It is done with a heap over the pairs, O(n log n) instead of
// llama2.c's O(n²) rescans, and gives the same tokens (a test checks both on long text).
// decode() is llama2.c's too: a piece after BOS loses its leading space, <0xNN> is the byte.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace infer {

class Tokenizer {
 public:
  static constexpr int kBos = 1;
  static constexpr int kEos = 2;

  // Reads `path` for a model of `vocab` tokens (the vocabulary size is the model's; the
  // file does not store it). Throws ringattn::FileError "tokenizer <path>: ..." for a file
  // that is not exactly `vocab` records (max_token_length, then per token a float32 score,
  // an int32 length within max_token_length and that many bytes), before it allocates
  // more than the file's size.
  static Tokenizer load(const std::string& path, std::int64_t vocab);

  std::vector<int> encode(std::string_view text, bool bos, bool eos) const;
  // llama2.c's reference encode, quadratic: for the test that the heap gives the same.
  std::vector<int> encode_by_rescans(std::string_view text, bool bos, bool eos) const;
  // The bytes of `token` after `prev` (throws std::out_of_range for an id outside the vocabulary).
  std::string_view decode(int prev, int token) const;
  // Whether the text shows it: not a lone control byte (llama2.c's safe_printf drops those,
  // and also lone bytes >= 0x80, which breaks UTF-8 from byte fallback; those are kept).
  static bool printable(std::string_view piece);
  // decode() of every token after `prev`, printable pieces only: the text llama2.c prints
  // (for text that needs no byte fallback beyond ASCII, byte for byte).
  std::string text(std::span<const int> tokens, int prev = kBos) const;
  // text() of a whole sequence as run.c prints it: a leading BOS is not printed, and the
  // piece after it loses its leading space.
  std::string sequence_text(std::span<const int> tokens) const;
  // Where a generated text ends: BOS (run.c stops there) or EOS.
  static bool ends_text(int token) { return token == kBos || token == kEos; }

  std::int64_t vocab() const { return static_cast<std::int64_t>(pieces_.size()); }
  const std::string& piece(int id) const { return pieces_.at(static_cast<std::size_t>(id)); }
  float score(int id) const { return scores_.at(static_cast<std::size_t>(id)); }
  int id_of(std::string_view piece) const;  // -1 if it is no token
  // A 64-bit digest of every piece and score (FNV-1a), for ranks to prove they tokenize alike.
  std::uint64_t digest() const;

 private:
  std::vector<int> characters(std::string_view text, bool bos) const;  // before the merges
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> ids_;
  char byte_pieces_[512] = {};  // byte b at [2b], NUL after it
};

}  // namespace infer
