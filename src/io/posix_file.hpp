// ringattn — an owned POSIX file descriptor whose reads and writes either transfer
// every byte or throw FileError naming the path, the operation and errno's text.
//
// pread/pwrite (not a FILE* or stream) because a node reads only its shard of a
// tensor at known offsets, and the output writer places rows at their final offsets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringattn::io {

class PosixFile {
 public:
  static PosixFile open_read(const std::string& path);
  // Creates `path`, which must not exist (O_EXCL), for writing with mode 0666 & ~umask.
  // Returns an invalid file (valid() == false) if it exists, so callers can retry with
  // another name; other failures throw.
  static PosixFile create_new(const std::string& path);

  PosixFile() = default;
  PosixFile(PosixFile&& other) noexcept;
  PosixFile& operator=(PosixFile&& other) noexcept;
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;
  ~PosixFile();

  bool valid() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  std::uint64_t size() const;

  // Reads exactly n bytes at offset; a file that ends early is an error (it shrank or
  // was truncated after its header was checked).
  void pread_exact(void* dst, std::size_t n, std::uint64_t offset) const;
  void pwrite_all(const void* src, std::size_t n, std::uint64_t offset);
  void truncate(std::uint64_t size);
  void sync();
  // Closes and reports a failed close (on NFS a write error can surface only here).
  void close();

 private:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// fsync of a directory, so a rename inside it survives a crash. Best effort: some
// file systems refuse it, which loses durability, not correctness.
void sync_directory(const std::string& dir) noexcept;

}  // namespace ringattn::io
