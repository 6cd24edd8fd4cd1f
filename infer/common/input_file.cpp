// infer — bounded whole-file reads (input_file.hpp).
#include "input_file.hpp"

#include <ringattn/error.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace infer {

namespace {

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};

// Opens `path` as a regular file of at most max_bytes; its descriptor and size.
std::uint64_t open_checked(const std::string& path, std::uint64_t max_bytes, const std::string& what, int& fd) {
  auto fail = [&](const std::string& why) { return ringattn::FileError(what + " " + path + ": " + why); };
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO: no wait for a writer
  if (fd < 0) throw fail(std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const int saved = errno;
  auto close_and = [&](const std::string& why) {
    ::close(fd);
    return fail(why);
  };
  if (!stat_ok) throw close_and(std::string("cannot stat (") + std::strerror(saved) + ")");
  if (!S_ISREG(st.st_mode))
    throw close_and("not a regular file (a FIFO, a device or a directory): give the path of a file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes)
    throw close_and(std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) + " this reader takes");
  return size;
}

}  // namespace

std::vector<char> read_input_file(const std::string& path, std::uint64_t max_bytes, const std::string& what) {
  auto fail = [&](const std::string& why) { return ringattn::FileError(what + " " + path + ": " + why); };
  int fd = -1;
  const std::uint64_t size = open_checked(path, max_bytes, what, fd);
  const Fd close_it{fd};
  std::vector<char> bytes(static_cast<std::size_t>(size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw fail(std::string("read error (") + std::strerror(errno) + ")");
    if (got == 0) throw fail("shorter than its size: it changed while being read");
    done += static_cast<std::size_t>(got);
  }
  return bytes;
}

MappedFile::MappedFile(const std::string& path, std::uint64_t max_bytes, const std::string& what) {
  int fd = -1;
  size_ = open_checked(path, max_bytes, what, fd);
  const Fd close_it{fd};  // the mapping outlives the descriptor
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED)
    throw ringattn::FileError(what + " " + path + ": cannot map " + std::to_string(size_) + " bytes (" +
                              std::strerror(errno) + ")");
  data_ = static_cast<const std::byte*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), static_cast<std::size_t>(size_));
}

void MappedFile::release(std::uint64_t offset, std::uint64_t n) const {
  if (!data_ || offset >= size_) return;
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t first = (offset + page - 1) / page * page, last = std::min(size_, offset + n) / page * page;
  if (last > first)  // whole pages only: a neighbour's bytes stay
    ::madvise(const_cast<std::byte*>(data_) + first, static_cast<std::size_t>(last - first), MADV_DONTNEED);
}

}  // namespace infer
