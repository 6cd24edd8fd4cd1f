// infer — a Hugging Face directory's safetensors, one file or sharded (hf_weights.hpp).
#include "hf_weights.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "../common/input_file.hpp"
#include "../common/json.hpp"

namespace infer {

namespace {

constexpr std::uint64_t kMaxIndexBytes = 64u << 20;
constexpr std::size_t kMaxShards = 4096;

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A shard's name as the index gives it: a plain file name in the directory.
bool plain_shard_name(const std::string& n) {
  if (n.empty() || n.size() > 255 || n == "." || n == ".." || !n.ends_with(".safetensors")) return false;
  for (char ch : n)
    if (ch == '/' || ch == '\\' || ch == '\0') return false;
  return n[0] != '.';
}

}  // namespace

HfWeights::HfWeights(const std::string& dir) : dir_(dir) {
  const std::string index = dir + "/model.safetensors.index.json";
  if (!std::filesystem::exists(index)) {
    const std::string single = dir + "/model.safetensors";
    if (!std::filesystem::exists(single))
      throw ringattn::FileError("model " + dir + ": neither model.safetensors nor model.safetensors.index.json " +
                                "(a Hugging Face model directory holds one of them)");
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const std::string& n : files_.back()->names()) where_[n] = files_.back().get();
    return;
  }
  auto fail = [&](const std::string& what) { return ringattn::FileError("model " + index + ": " + what); };
  const std::vector<char> bytes = read_input_file(index, kMaxIndexBytes, "model");
  Json j;
  try {
    j = parse_json(std::string_view(bytes.data(), bytes.size()));
  } catch (const std::runtime_error& e) {
    throw fail(e.what());
  }
  const Json* map = json_field(j, "weight_map");
  if (!map || !map->is_object() || map->empty()) throw fail("no \"weight_map\" object of tensor names to files");
  std::map<std::string, SafetensorsFile*> opened;
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string() || !plain_shard_name(file.get<std::string>()))
      throw fail("weight_map[\"" + tensor + "\"] = " + file.dump().substr(0, 200) +
                 " is not a .safetensors file name in the model's directory");
    const std::string name = file.get<std::string>();
    auto it = opened.find(name);
    if (it == opened.end()) {
      if (opened.size() == kMaxShards) throw fail("more than " + std::to_string(kMaxShards) + " shard files");
      files_.push_back(std::make_unique<SafetensorsFile>(dir + "/" + name));
      it = opened.emplace(name, files_.back().get()).first;
    }
    if (!it->second->has(tensor))
      throw fail("weight_map puts tensor \"" + tensor + "\" in " + name + ", which does not hold it");
    where_[tensor] = it->second;
  }
  for (const auto& f : files_)
    for (const std::string& n : f->names()) {
      const auto it = where_.find(n);
      if (it == where_.end()) throw fail("tensor \"" + n + "\" of " + f->path() + " is not in the weight_map");
      if (it->second != f.get()) throw fail("tensor \"" + n + "\" is in " + f->path() + " and in another shard");
    }
}

SafetensorsFile& HfWeights::file(const std::string& name, std::span<const std::int64_t> shape) const {
  const auto it = where_.find(name);
  if (it == where_.end())
    throw ringattn::FileError("model " + dir_ + ": no tensor \"" + name + "\" (expected shape " + shape_text(shape) +
                              "; does config.json describe these weights?)");
  return *it->second;
}

ringattn::DType HfWeights::dtype(const std::string& name) const { return file(name, {}).dtype(name); }

TensorView HfWeights::view(const std::string& name, std::span<const std::int64_t> shape) {
  return file(name, shape).view(name, shape);
}

std::vector<float> HfWeights::take(const std::string& name, std::span<const std::int64_t> shape) {
  return file(name, shape).take(name, shape);
}

void HfWeights::release(const std::string& name) const { file(name, {}).release(name); }

const std::string& HfWeights::file_of(const std::string& name) const { return file(name, {}).path(); }

std::vector<std::string> HfWeights::unused() const {
  std::vector<std::string> out;
  for (const auto& f : files_)
    for (const std::string& n : f->unused()) out.push_back(f->path() + ": tensor \"" + n + "\"");
  return out;
}

std::vector<const SafetensorsFile*> HfWeights::files() const {
  std::vector<const SafetensorsFile*> out;
  for (const auto& f : files_) out.push_back(f.get());
  std::sort(out.begin(), out.end(), [](const SafetensorsFile* a, const SafetensorsFile* b) { return a->path() < b->path(); });
  return out;
}

}  // namespace infer
