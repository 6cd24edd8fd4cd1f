// infer — constrained decoding: what each token id adds to the generated text, as bytes, and the
// vocabulary as a byte trie the matcher walks (matcher.hpp).
//
// The bytes are TextTokenizer::text_bytes: a byte-level BPE piece through GPT-2's byte map, a
// SentencePiece piece with U+2581 as a space, a <0xNN> byte-fallback piece as its byte, a
// llama2.c piece as run.c prints it. An id with no bytes (a special or control token, an
// unprintable byte, an empty piece, an id past the tokenizer) is never allowed inside a text:
// nothing the grammar can follow (a token that adds nothing would let a text run forever).
//
// The trie holds every id with bytes, its nodes in preorder: node 0 is the root (no byte), a
// node's subtree is the nodes [i, end(i)), so a walk that finds a prefix dead skips its whole
// subtree in one step; the ids whose bytes end at node i are ids[id_at[i], id_at[i + 1]),
// contiguous in preorder too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace infer {
class TextTokenizer;
}

namespace infer::constrain {

struct TokenTrie {
  std::vector<std::uint8_t> byte;     // the byte into node i (node 0: none)
  std::vector<std::uint16_t> depth;   // bytes from the root
  std::vector<std::uint32_t> end;     // one past node i's subtree
  std::vector<std::uint32_t> id_at;   // nodes + 1 entries
  std::vector<std::int32_t> ids;
  // The classes (byte_class) of the bytes into node i and every node below it, and the height of
  // its subtree: a walk whose state takes any byte of those classes the same way, that many
  // times over, takes the whole subtree without walking it.
  std::vector<std::uint16_t> classes;
  std::vector<std::uint16_t> height;  // the bytes of the longest path down from node i, its own included
  std::size_t nodes() const { return byte.size(); }
  // Fourteen classes of bytes, as JSON text tells them apart: controls, space, '"', '\', digits,
  // letters, the other ASCII in four runs, UTF-8 continuation and lead bytes.
  static std::uint16_t byte_class(std::uint8_t b);
};

// Immutable once made; copies share it (one per tokenizer, for every request).
class TokenBytes {
 public:
  // By id: the bytes, or nullopt for an id that is never text. Ids are 0 .. bytes.size() - 1.
  explicit TokenBytes(std::vector<std::optional<std::string>> bytes);

  std::int32_t vocab() const;  // ids 0 .. vocab() - 1 (a model may have more rows: never text)
  bool text(std::int32_t id) const;  // it has bytes
  std::string_view bytes(std::int32_t id) const;  // "" where text(id) is false
  std::size_t longest() const;  // the longest token's bytes
  const TokenTrie& trie() const;
  std::uint64_t serial() const;  // this vocabulary's number, unique in the process (mask_memo.hpp)

 private:
  struct Data;
  std::shared_ptr<const Data> d_;
};

// The bytes of every id of `tok` (TextTokenizer::text_bytes).
TokenBytes token_bytes(const TextTokenizer& tok);

// The text of a constrained reply as its tokens come: each token's bytes, the end of a UTF-8
// character held back until its last byte (finish() gives what is left). It is byte for byte
// the text the matcher checked; TextTokenizer::stream's can differ where the tokenizer.json
// cleans up spaces before punctuation (Llama 3's does: "a ," becomes "a,", inside a string too)
// and where it takes a leading space off the text's first token.
class BytesStream {
 public:
  explicit BytesStream(const TokenBytes& tokens) : tokens_(tokens) {}
  std::string next(std::int32_t id);  // "" for an id with no bytes
  std::string finish();

 private:
  TokenBytes tokens_;
  std::string held_;
};

}  // namespace infer::constrain
