// infer — a Hugging Face model directory's config.json, read into a ModelConfig.
//
// Architectures (model_type): the registry's rows (architecture.hpp), each reading its own
// keys (Gemma 3's windows and query scalar, Phi-3's window, ...). RoPE from rope_theta and
// rope_scaling ("llama3", "linear") or transformers 5's rope_parameters. Every field that
// sizes the model is checked (an exact integer in range) before it is used; a setting the
// runtime does not implement (another activation, attention or MLP biases beyond qwen2's,
// capped scores, partial RoPE, another RoPE scaling, a quantization_config) is refused,
// naming the file and the key, never ignored.
#pragma once

#include <string>
#include <vector>

#include "../common/json.hpp"
#include "model.hpp"

namespace infer {

// The configuration config.json describes (`path` names it in errors). RoPE is HF's
// rotate-half. Throws ringattn::FileError "model <path>: ...". The file is read once per load
// by ModelFiles::hf_config (model_files.hpp).
ModelConfig hf_config(const Json& config, const std::string& path);

// A Hugging Face model directory's config.json as read once per load (the job's
// ModelFiles holds it: the configuration, the end tokens and the fingerprint read it).
struct HfConfigFile {
  std::string path;         // dir/config.json
  std::vector<char> bytes;  // as read (the fingerprint samples them)
  Json json;
  ModelConfig config;  // hf_config(json, path): checked
};

// A small JSON file of a model directory (config.json, generation_config.json): read into
// `bytes` (bounded: 1 MiB, a regular file) and parsed. Throws ringattn::FileError "model <path>: ...".
Json read_hf_json(const std::string& path, std::vector<char>& bytes);

// Reads and parses `dir`/config.json as above, then checks it (hf_config).
HfConfigFile read_hf_config(const std::string& dir);

}  // namespace infer
