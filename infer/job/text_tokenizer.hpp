// infer — the model's tokenizer as generation uses it, whichever file it came from:
// llama2.c's tokenizer.bin (tokenizer.hpp), a Hugging Face tokenizer.json (with the
// tokenizer_config.json beside it) or a GGUF file's own vocabulary (tokenizer_json.hpp,
// tokenizer_gguf.hpp). Prompts as text are encoded through it, generated ids become text
// through it (streamed, token by token), and the ranks compare its digest.
//
// Which one a job gets (load_text_tokenizer): --tokenizer FILE if given (a .json file is a
// tokenizer.json, anything else llama2.c's format); else a Hugging Face directory's
// tokenizer.json; else a GGUF file's vocabulary. Where a GGUF vocabulary is of a kind this
// runtime does not run, the model still loads (prompts as ids work) and a prompt as text
// is refused with the reason.
//
// Where a generated text ends (end_tokens): llama2.c's BOS and EOS (run.c stops at BOS);
// a Hugging Face directory's eos_token_id (generation_config.json, else config.json; an id
// or a list); a GGUF file's end-of-generation tokens as llama.cpp gathers them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace infer {

class ModelFiles;
struct JobOptions;

// Text as generated ids come; next() gives what `token` completes (it may hold text back
// until a later token settles it, e.g. half a UTF-8 character), finish() the rest.
class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual std::string next(int token) = 0;
  virtual std::string finish() = 0;
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  // A text as a prompt's ids: `opens` for a text that opens a sequence (the tokenizer's BOS
  // or whatever its post-processor adds), not for a session's next message. Throws
  // ringattn::InvalidArgument, naming it, for a text that holds an added token past the
  // model's rows (see load_text_tokenizer).
  virtual std::vector<int> encode(std::string_view text, bool opens) const = 0;
  // The ids a sequence opens with (BOS), for a prompt given as ids.
  virtual std::vector<int> opening() const = 0;
  // A whole sequence's text as printed: a prompt echoed, the batch job's "text" (special
  // tokens such as BOS are not shown).
  virtual std::string text(std::span<const int> tokens) const = 0;
  // The text of the tokens generated after `prompt`, as they come. Reads this tokenizer,
  // which must outlive it. An id the tokenizer does not have (a model may have more
  // embedding rows than tokens) is no text.
  virtual std::unique_ptr<TextStream> stream(std::span<const int> prompt) const = 0;
  // The bytes `token` adds to the text stream() makes, in the middle of a generated text (after
  // a token that is not BOS), or nullopt for an id that is never text there: a special or control
  // token, an unprintable byte, an id the tokenizer does not have. For constrained decoding
  // (infer/constrain/token_bytes.hpp). Joined, they are the stream's text when it is well-formed
  // UTF-8, but for a leading space the stream may take from a text's first token and a
  // tokenizer.json's clean-up of spaces before punctuation (TokenizerJson::text_bytes).
  virtual std::optional<std::string> text_bytes(int token) const = 0;
  virtual std::int64_t vocab() const = 0;  // one more than its largest id
  virtual std::uint64_t digest() const = 0;
  virtual std::string describe() const = 0;  // "tokenizer FILE (llama2.c)", for errors and logs
};

// What load_text_tokenizer found: the tokenizer (none when there is no file for one) and,
// without one, why, for the error a prompt as text gets.
struct LoadedTokenizer {
  std::unique_ptr<TextTokenizer> tokenizer;
  std::string missing;  // "give --tokenizer FILE (...)" or the vocabulary's refusal
};

// The tokenizer for the model `opt` names (opt.model is its configuration, read already),
// from its files as `files` opened them (model_files.hpp).
// Throws ringattn::FileError naming the file for a tokenizer file that is there but bad, or
// that has ids past the model's vocabulary other than added tokens that follow its last row
// without a gap (Gemma 3 1B's <image_soft_token>, 262144 beside 262144 rows: a text holding
// one is refused when encoded, as nothing could embed it).
LoadedTokenizer load_text_tokenizer(const JobOptions& opt, ModelFiles& files);

// The ids that end a generated text for the model `opt` names. Throws ringattn::FileError
// naming the file for an eos_token_id that is not an id of the model.
std::vector<std::int32_t> end_tokens(const JobOptions& opt, ModelFiles& files);

}  // namespace infer
