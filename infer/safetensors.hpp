// infer — a validating reader of safetensors files (F32 tensors only).
//
// The format: 8 bytes, the header's length N as a little-endian u64; N bytes of JSON
// mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data that follows the header), plus an optional "__metadata__" of
// strings; then the data. Every field is checked before it sizes or indexes anything:
// the header length against the file, each dtype, each shape (non-negative, no overflow),
// each [begin, end) inside the data and exactly shape x 4 bytes long. Errors throw
// ringattn::FileError naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace infer {

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // reads and validates the whole file

  // The tensor's elements, checked to have exactly `shape`; throws FileError naming the
  // file, the tensor and both shapes otherwise, or if it is absent. Marks it used.
  std::vector<float> take(const std::string& name, std::span<const std::int64_t> shape);

  // Names never taken (a file for another configuration, or a typo in a name).
  std::vector<std::string> unused() const;
  const std::string& path() const { return path_; }

 private:
  struct Entry {
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;
    bool used = false;
  };
  std::string path_;
  std::vector<char> data_;  // the bytes after the header
  std::map<std::string, Entry> entries_;
};

}  // namespace infer
