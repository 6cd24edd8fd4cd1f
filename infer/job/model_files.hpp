// infer — the files of one job's model, each opened and parsed once per load and handed to
// whatever reads it: the weights and the configuration (Model::from_gguf, Model::from_hf),
// the tokenizer and the end tokens (text_tokenizer.hpp), the chat template (chat.hpp) and
// the fingerprint (fingerprint.hpp) — as llama.cpp's one loader hands its context to the
// vocabulary and the weights. Before it, a GGUF file was mapped and its metadata (a 150k-
// entry vocabulary included) parsed four times on one load and sampled a fifth; a Hugging
// Face directory's config.json and tokenizer_config.json read twice.
//
// What it holds, each made on first use (so a load fails at the same file, in the same
// order, as the readers ask for them):
// - a GGUF file (--gguf): mapped, its metadata and tensor index parsed (gguf.hpp);
// - a Hugging Face directory (--hf): config.json read, parsed and checked (hf_config.hpp),
//   its safetensors mapped (hf_weights.hpp), generation_config.json where there is one;
// - the tokenizer_config.json beside the tokenizer: --tokenizer FILE.json's directory, else
//   the Hugging Face directory (the tokenizer's decode setting, the chat template and its
//   special tokens).
// A llama2.c checkpoint or a --weights file is read by its loader and sampled by the
// fingerprint: two opens, neither of them a parse.
//
// The object lives for one load (load.hpp's load_model): the mapped files are unmapped
// when it goes, the model holding its own packed copy of every weight.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../common/json.hpp"
#include "../model/hf_config.hpp"
#include "../model/model.hpp"

namespace infer {

class GgufFile;
class HfWeights;

// A JSON file beside the model or its tokenizer, read once; `path` names it in errors.
struct JsonMapFile {
  std::string path;
  JsonMap json;
};

class ModelFiles {
 public:
  // A model from a GGUF file `gguf` or a Hugging Face directory `hf` (one of them, or
  // neither: llama2.c's, safetensors', seeded), its tokenizer `tokenizer` (JobOptions's:
  // empty for the model's own). Opens nothing yet: each file is opened as it is first asked for.
  ModelFiles(std::string gguf, std::string hf, const std::string& tokenizer = {});
  ~ModelFiles();
  ModelFiles(const ModelFiles&) = delete;
  ModelFiles& operator=(const ModelFiles&) = delete;

  // The GGUF file opt.gguf names; throws std::logic_error without one.
  GgufFile& gguf();
  // The Hugging Face directory opt.hf names; throws std::logic_error without one.
  const std::string& hf_dir() const { return hf_dir_; }
  const HfConfigFile& hf_config();
  HfWeights& hf_weights();
  // generation_config.json of the directory; null where there is none.
  const Json* hf_generation_config();
  // The tokenizer_config.json beside the tokenizer (see above); null where there is none,
  // or where the tokenizer is llama2.c's (which has none). Throws ringattn::FileError for
  // one that is there but unreadable or not JSON.
  const JsonMapFile* tokenizer_config();
  // Where tokenizer_config.json and chat_template.jinja are looked for: --tokenizer
  // FILE.json's directory ("" for the working directory), else the Hugging Face directory;
  // nullopt: nowhere (llama2.c's tokenizer, or a model without a directory).
  const std::optional<std::string>& tokenizer_dir() const { return tokenizer_dir_; }

 private:
  std::string gguf_path_, hf_dir_;
  std::optional<std::string> tokenizer_dir_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<HfConfigFile> hf_config_;
  std::unique_ptr<HfWeights> hf_weights_;
  std::optional<std::optional<Json>> generation_;  // outer: looked for yet
  std::optional<std::optional<JsonMapFile>> tokenizer_config_;
};

}  // namespace infer
