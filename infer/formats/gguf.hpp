// infer — a validating reader of GGUF files (llama.cpp's format, versions 2 and 3),
// memory-mapped.
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count; the metadata (a string
// key, a u32 value type, the value: integers, floats, bool, a string = u64 length + bytes,
// or an array = u32 item type + u64 count + items); the tensor infos (name, u32 dimension
// count, u64 dimensions innermost first, u32 ggml type, u64 offset); padding to
// general.alignment (default 32); the data, each tensor at its offset, aligned.
//
// Every count, length, dimension and offset is checked against the bytes left and the
// bounds below before it sizes or indexes anything; errors throw ringattn::FileError
// "model <path>: ..." naming the key or the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include <ringattn/tensor_types.hpp>

#include "../common/input_file.hpp"
#include "safetensors.hpp"

namespace infer {

class GgufFile {
 public:
  using Value = std::variant<std::int64_t, double, bool, std::string, std::vector<std::string>, std::vector<double>>;

  explicit GgufFile(const std::string& path);  // maps the file, then as below
  // The bytes of a GGUF file held by the caller for the object's life (a fuzzer's input);
  // `name` stands for the path in errors.
  GgufFile(std::span<const std::byte> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  // The whole file as mapped or given (the fingerprint samples it).
  std::span<const std::byte> bytes() const { return {data_, static_cast<std::size_t>(size_)}; }
  // Metadata: absent -> nullopt; present with another type -> FileError naming the key.
  std::optional<std::int64_t> integer(const std::string& key, std::int64_t lo, std::int64_t hi) const;
  std::optional<double> number(const std::string& key) const;
  std::optional<std::string> string(const std::string& key) const;
  std::optional<bool> boolean(const std::string& key) const;
  const std::vector<std::string>* strings(const std::string& key) const;
  const std::vector<double>* numbers(const std::string& key) const;

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  std::vector<std::string> names() const;
  // A tensor's dimensions, outermost first; throws FileError if it is absent.
  const std::vector<std::int64_t>& shape(const std::string& name) const;
  // The DType of a tensor's ggml type (the table of tensor types, ringattn/tensor_types.hpp).
  ringattn::DType type(const std::string& name) const;
  // An F32, F16, BF16, Q8_0, Q4_K or Q6_K tensor of exactly `shape` (outermost first, as
  // [out, in]), marked used.
  TensorView view(const std::string& name, std::span<const std::int64_t> shape);
  std::vector<float> take(const std::string& name, std::span<const std::int64_t> shape);
  void release(const std::string& name) const;
  const std::string& file_of(const std::string&) const { return path_; }
  std::vector<std::string> unused() const;

 private:
  struct Tensor {
    const ringattn::TensorType* type = nullptr;  // its row of the table; parse refuses a type without one
    std::vector<std::int64_t> shape;  // outermost first
    std::uint64_t begin = 0, bytes = 0;
    bool used = false;
  };
  void parse();
  std::string path_;
  std::unique_ptr<MappedFile> file_;  // null for caller-held bytes
  const std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
  std::uint32_t version_ = 0;
  std::map<std::string, Value> meta_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace infer
