// infer — Hugging Face tokenizer.json: the BPE tokenizers of the Llama, Qwen and Gemma 3 families.
//
// Three kinds load, each exactly as the tokenizers library (and transformers.js, the oracle
// the tests compare with token for token) runs it:
//   byte-level BPE (Llama 3, Qwen 2/3): normalizer null or NFC; pre-tokenizer Split on the
//     Llama 3 or Qwen regex (pretokenize.hpp), then ByteLevel; merges over the 256 byte
//     characters; `ignore_merges` (a word that is a token is that token); decoder ByteLevel.
//   SentencePiece-style BPE (Llama 2, Mistral): normalizer Prepend("▁") + Replace(" ", "▁"),
//     no pre-tokenizer, merges over characters with byte fallback (<0xNN>) or <unk>;
//     decoder Replace("▁", " "), ByteFallback, Fuse, Strip(" ", n, 0).
//   the same without the prefix space (Gemma 3): normalizer Replace(" ", "▁") alone, a
//     pre-tokenizer Split on the String " " (MergedWithPrevious: any of the library's five
//     behaviors runs, split_delimiter.hpp), decoder without Strip.
// Added tokens (special or not) are found in the text first, leftmost and longest, and are
// never normalized or merged; `lstrip`/`rstrip` take the spaces beside them. `encode` with
// `add_special` applies the post-processor (TemplateProcessing's single sequence, e.g. BOS).
//
// The text is read as the WHATWG decoder reads UTF-8 (ill-formed bytes become U+FFFD, as
// in a JavaScript string). Anything else a file may say (another model type, normalizer,
// pre-tokenizer, regex, decoder, dropout, a continuing-subword prefix) is refused at load,
// naming the field and the file: a tokenizer that cannot be run exactly is not run at all.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../common/json.hpp"

namespace infer {

class TokenizerJson {
 public:
  // What decode does to spaces before punctuation and contractions: nothing; transformers'
  // clean_up_tokenization (" ." " ?" " !" " ," " ' " " n't" " 'm" " 's" " 've" " 're" lose
  // their space); or llama.cpp's clean_spaces (the same without " n't").
  enum class CleanUp { none, transformers, llama_cpp };

  // Reads and checks `file` (at most 64 MiB). Throws ringattn::FileError naming the file and
  // the field for anything it cannot run exactly or that is inconsistent (a merge of tokens
  // not in the vocabulary, an id out of range, a byte-level vocabulary without the 256 bytes).
  static TokenizerJson load(const std::filesystem::path& file);
  // The same, and the decode setting of the tokenizer_config.json beside it (`config`, if
  // it exists): clean_up_tokenization_spaces (true when the file does not say, as in
  // transformers). Chat templates and special-token roles are read elsewhere.
  static TokenizerJson load(const std::filesystem::path& file, const std::filesystem::path& config);
  // The same with the tokenizer_config.json read already (read_tokenizer_config; null: there
  // is none), `config_path` naming it in errors.
  static TokenizerJson load(const std::filesystem::path& file, const JsonMap* config, const std::string& config_path);
  // The same from a parsed tree; `where` names it in errors.
  // `llama_cpp`: run it as llama.cpp runs a GGUF vocabulary: \s is Unicode's White_Space
  // (not JavaScript's) and decode cleans spaces llama.cpp's way when `clean_up` says so.
  static TokenizerJson from_json(const JsonMap& j, const std::string& where, CleanUp clean_up = CleanUp::none, bool llama_cpp = false);

  TokenizerJson(TokenizerJson&&) noexcept;
  TokenizerJson& operator=(TokenizerJson&&) noexcept;
  ~TokenizerJson();

  std::vector<int> encode(std::string_view text, bool add_special) const;
  // The ids encode(..., true) puts before the text (the post-processor's, e.g. BOS).
  const std::vector<int>& opening() const;
  // The text of `ids` as the file's decoder makes it; special tokens as their text unless
  // `skip_special`. Throws std::out_of_range for an id that is no token.
  // Then the clean-up of spaces the tokenizer was loaded with.
  std::string decode(std::span<const int> ids, bool skip_special = false) const;

  struct Impl;  // tokenizer_json_impl.hpp: shared by the reader and the runner only

  // decode() as the ids come, for text that streams while it is generated: next(id) gives
  // the text `id` completes, finish() the rest, and all of it joined is decode(ids,
  // skip_special) byte for byte. Text is held back while a later id could still change it:
  // an unfinished UTF-8 character or byte-fallback run, and, where decode cleans up spaces,
  // the text from the last space a clean-up could still remove. A stream reads the
  // tokenizer it came from, which must outlive it. next() throws std::out_of_range as decode.
  class Stream {
   public:
    std::string next(int id);
    std::string finish();

   private:
    friend class TokenizerJson;
    Stream(const Impl& t, bool skip_special) : t_(&t), skip_(skip_special) {}
    void append(std::string raw);
    std::string take(bool all);
    const Impl* t_;
    bool skip_;
    std::vector<int> pending_;  // ids not yet made text (an open byte run, an unfinished character)
    std::string tail_;          // text made but not given (what a clean-up could still change)
    int stripped_ = 0;          // leading spaces the decoder's Strip removed so far
    bool started_ = false;      // past the leading spaces
    bool fresh_ = true;         // no id made text yet (the next is the text's first)
  };
  Stream stream(bool skip_special) const;
  CleanUp clean_up() const;

  // One more than the largest id (the model's embedding may have more rows).
  std::int64_t vocab() const;
  bool has(int id) const;
  const std::string& piece(int id) const;  // the vocabulary's string of `id`
  std::optional<int> id_of(std::string_view piece) const;
  bool special(int id) const;
  bool added(int id) const;  // one of added_tokens (found in the text before the model runs)
  bool byte_level() const;
  // The bytes `id` adds to the text a Stream(true) makes, in the middle of a text: a byte-level
  // piece's bytes, a <0xNN> piece's byte, a SentencePiece piece with U+2581 as a space, an added
  // token's content; nullopt for a special token (the stream skips it) or an id that is no token.
  // Joined, they are the stream's text when that text is well-formed UTF-8, except that the
  // decoder's Strip or a GGUF vocabulary's space prefix takes the text's leading space and a
  // clean-up of spaces (clean_up()) can take a space before punctuation.
  std::optional<std::string> text_bytes(int id) const;
  // A 64-bit digest of everything encode and decode depend on, for ranks to prove they agree.
  std::uint64_t digest() const;

 private:
  static TokenizerJson read_tokenizer(const JsonMap& j, const std::string& where);
  explicit TokenizerJson(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A tokenizer_config.json (at most 64 MiB, a regular file, JSON as json.hpp reads it).
// Throws ringattn::FileError "tokenizer config <path>: ..." naming what is wrong.
JsonMap read_tokenizer_config(const std::filesystem::path& path);

}  // namespace infer
