// infer — reading an input file whole, bounded: a regular file (a FIFO would block, and
// /dev/zero never ends), no larger than the reader allows, its size checked before a byte
// is read or allocated. Or mapping it (MappedFile): the same checks, its pages read only
// as they are touched and dropped again once used (a model's weights, packed elsewhere).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace infer {

// The bytes of `path`; throws ringattn::FileError "<what> <path>: ..." if it is not a
// regular file, is larger than `max_bytes`, or cannot be read.
std::vector<char> read_input_file(const std::string& path, std::uint64_t max_bytes, const std::string& what);

// A regular file mapped read-only, checked as read_input_file checks it.
class MappedFile {
 public:
  MappedFile(const std::string& path, std::uint64_t max_bytes, const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  // Tells the kernel bytes [offset, offset + n) are done with: their pages leave this
  // process's memory (a later read maps them again from the page cache or the disk).
  void release(std::uint64_t offset, std::uint64_t n) const;

 private:
  const std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace infer
