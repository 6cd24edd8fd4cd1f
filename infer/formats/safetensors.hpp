// infer — a validating reader of safetensors files: F32, BF16 and F16 tensors, memory-mapped.
//
// The format: 8 bytes, the header's length N as a little-endian u64; N bytes of JSON
// mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data that follows the header), plus an optional "__metadata__" of
// strings; then the data. Every field is checked before it sizes or indexes anything:
// the header length against the file, each dtype, each shape (non-negative, no overflow),
// each [begin, end) inside the data, aligned to its element and exactly shape x element
// bytes long. Errors throw ringattn::FileError naming the file and the tensor.
//
// The file is mapped, not read: a tensor's bytes are read from the page cache as the model
// packs them (view), and given back after (release), so loading holds the packed model
// and a tensor or so of the file, never the whole file beside it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <ringattn/types.hpp>

#include "../common/input_file.hpp"

namespace infer {

// A tensor's elements where the file holds them: `elements` values of `dtype`
// (f32, bf16 or f16 bit patterns, little-endian, aligned to their size; or GGUF's q8_0,
// q4_k or q6_k blocks, include/ringattn/blocks.hpp).
struct TensorView {
  ringattn::DType dtype = ringattn::DType::f32;
  const std::byte* data = nullptr;
  std::uint64_t elements = 0;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // maps the file, validates the header

  // The tensor, checked to have exactly `shape`; throws FileError naming the file, the
  // tensor and both shapes otherwise, or if it is absent. Marks it used.
  TensorView view(const std::string& name, std::span<const std::int64_t> shape);
  // The same, widened to fp32, checked finite.
  std::vector<float> take(const std::string& name, std::span<const std::int64_t> shape);
  // Gives a viewed tensor's pages back (the data stays readable, from the disk again).
  void release(const std::string& name) const;

  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // The dtype the file holds `name` in; throws FileError if it is absent.
  ringattn::DType dtype(const std::string& name) const;
  std::vector<std::string> names() const;
  // Names never viewed (a file for another configuration, or a typo in a name).
  std::vector<std::string> unused() const;
  const std::string& path() const { return path_; }
  // The whole file as mapped (the fingerprint samples it).
  std::span<const std::byte> bytes() const { return {file_->data(), static_cast<std::size_t>(file_->size())}; }

 private:
  struct Entry {
    ringattn::DType dtype = ringattn::DType::f32;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;  // in the file, past the header
    bool used = false;
  };
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, Entry> entries_;
};

// Throws FileError "<what>: tensor "<name>" holds NaN or inf" if any element is not finite.
void check_finite(const TensorView& t, const std::string& what, const std::string& name);
// The elements widened to fp32 (exact).
std::vector<float> widen(const TensorView& t);

}  // namespace infer
