#include "posix_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "ringattn/error.hpp"

namespace ringattn::io {
namespace {

[[noreturn]] void fail_errno(const std::string& path, const std::string& op, int err) {
  throw FileError(path + ": " + op + " failed: " + std::strerror(err));
}

// Linux transfers at most about 2 GiB per call; larger requests are split anyway.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

}  // namespace

PosixFile PosixFile::open_read(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_errno(path, "open for reading", errno);
  PosixFile f(fd, path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_errno(path, "stat", errno);
  if (!S_ISREG(st.st_mode))
    throw FileError(path + ": not a regular file (" +
                    (S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISDIR(st.st_mode) ? "a directory" : "not a file") +
                    "): give the path of a file");
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return f;
}

PosixFile PosixFile::create_new(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    if (errno == EEXIST) return PosixFile();
    fail_errno(path, "create", errno);
  }
  return PosixFile(fd, path);
}

PosixFile::PosixFile(PosixFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

PosixFile& PosixFile::operator=(PosixFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

PosixFile::~PosixFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t PosixFile::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail_errno(path_, "stat", errno);
  if (!S_ISREG(st.st_mode)) throw FileError(path_ + ": not a regular file");
  return static_cast<std::uint64_t>(st.st_size);
}

void PosixFile::pread_exact(void* dst, std::size_t n, std::uint64_t offset) const {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, std::min(n, kMaxChunk), static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_errno(path_, "read at byte " + std::to_string(offset), errno);
    }
    if (got == 0)
      throw FileError(path_ + ": unexpected end of file at byte " + std::to_string(offset) + " (" +
                      std::to_string(n) + " more bytes expected; was the file truncated while in use?)");
    p += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

void PosixFile::pwrite_all(const void* src, std::size_t n, std::uint64_t offset) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = ::pwrite(fd_, p, std::min(n, kMaxChunk), static_cast<off_t>(offset));
    if (put < 0) {
      if (errno == EINTR) continue;
      fail_errno(path_, "write at byte " + std::to_string(offset), errno);
    }
    p += put;
    n -= static_cast<std::size_t>(put);
    offset += static_cast<std::uint64_t>(put);
  }
}

void PosixFile::truncate(std::uint64_t size) {
  if (size > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ||
      ::ftruncate(fd_, static_cast<off_t>(size)) != 0)
    fail_errno(path_, "resize to " + std::to_string(size) + " bytes", errno ? errno : EFBIG);
}

void PosixFile::sync() {
  if (::fsync(fd_) != 0) fail_errno(path_, "fsync", errno);
}

void PosixFile::close() {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail_errno(path_, "close", errno);
}

void sync_directory(const std::string& dir) noexcept {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace ringattn::io
