// infer — the weights of a Hugging Face model directory: model.safetensors, or the shards a
// model.safetensors.index.json names ({"weight_map": {tensor: file}}), each a mapped
// SafetensorsFile. The index is untrusted input: every file name is a plain name in the
// directory (no path, no "..", ending in .safetensors), every tensor it lists must be in the
// file it names, and every tensor a shard holds must be listed.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "safetensors.hpp"

namespace infer {

class HfWeights {
 public:
  explicit HfWeights(const std::string& dir);

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  ringattn::DType dtype(const std::string& name) const;
  // As SafetensorsFile's, from the file holding `name`; errors name that file.
  TensorView view(const std::string& name, std::span<const std::int64_t> shape);
  std::vector<float> take(const std::string& name, std::span<const std::int64_t> shape);
  void release(const std::string& name) const;
  // The file holding `name` (for errors).
  const std::string& file_of(const std::string& name) const;
  // "file: tensor" for every tensor never viewed.
  std::vector<std::string> unused() const;
  // The safetensors files it mapped, by path.
  std::vector<const SafetensorsFile*> files() const;

 private:
  SafetensorsFile& file(const std::string& name, std::span<const std::int64_t> shape) const;
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, SafetensorsFile*> where_;
};

}  // namespace infer
