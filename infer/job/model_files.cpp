// infer — one job's model files, each opened and parsed once (model_files.hpp).
#include "model_files.hpp"

#include <ringattn/error.hpp>

#include <filesystem>
#include <stdexcept>

#include "../formats/gguf.hpp"
#include "../model/hf_config.hpp"
#include "../formats/hf_weights.hpp"
#include "../tokenizers/tokenizer_json.hpp"

namespace infer {

namespace {

namespace fs = std::filesystem;

// Where tokenizer_config.json is looked for (model_files.hpp); nullopt: nowhere. "" is the
// working directory (--tokenizer tokenizer.json).
std::optional<std::string> tokenizer_dir_of(const std::string& tokenizer, const std::string& hf) {
  if (tokenizer.empty()) return hf.empty() ? std::nullopt : std::optional(hf);
  if (fs::path(tokenizer).extension() != ".json") return std::nullopt;  // llama2.c's: no config
  return fs::path(tokenizer).parent_path().string();
}

}  // namespace

ModelFiles::ModelFiles(std::string gguf, std::string hf, const std::string& tokenizer)
    : gguf_path_(std::move(gguf)), hf_dir_(std::move(hf)), tokenizer_dir_(tokenizer_dir_of(tokenizer, hf_dir_)) {}

ModelFiles::~ModelFiles() = default;

GgufFile& ModelFiles::gguf() {
  if (gguf_path_.empty()) throw std::logic_error("ModelFiles::gguf: the job names no GGUF file");
  if (!gguf_) gguf_ = std::make_unique<GgufFile>(gguf_path_);
  return *gguf_;
}

const HfConfigFile& ModelFiles::hf_config() {
  if (hf_dir_.empty()) throw std::logic_error("ModelFiles::hf_config: the job names no Hugging Face directory");
  if (!hf_config_) hf_config_ = std::make_unique<HfConfigFile>(read_hf_config(hf_dir_));
  return *hf_config_;
}

HfWeights& ModelFiles::hf_weights() {
  if (hf_dir_.empty()) throw std::logic_error("ModelFiles::hf_weights: the job names no Hugging Face directory");
  if (!hf_weights_) hf_weights_ = std::make_unique<HfWeights>(hf_dir_);
  return *hf_weights_;
}

const Json* ModelFiles::hf_generation_config() {
  if (hf_dir_.empty()) return nullptr;
  if (!generation_) {
    const std::string path = hf_dir_ + "/generation_config.json";
    std::optional<Json> g;
    if (fs::exists(path)) {
      std::vector<char> bytes;
      g = read_hf_json(path, bytes);
    }
    generation_ = std::move(g);
  }
  return *generation_ ? &**generation_ : nullptr;
}

const JsonMapFile* ModelFiles::tokenizer_config() {
  if (!tokenizer_dir_) return nullptr;
  if (!tokenizer_config_) {
    const std::string path = (fs::path(*tokenizer_dir_) / "tokenizer_config.json").string();
    std::optional<JsonMapFile> f;
    if (fs::exists(path)) f = JsonMapFile{path, read_tokenizer_config(path)};
    tokenizer_config_ = std::move(f);
  }
  return *tokenizer_config_ ? &**tokenizer_config_ : nullptr;
}

}  // namespace infer
