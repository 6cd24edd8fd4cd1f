// infer — bounded whole-file reads (input_file.hpp).
#include "input_file.hpp"

#include <ringattn/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace infer {

std::vector<char> read_input_file(const std::string& path, std::uint64_t max_bytes, const std::string& what) {
  auto fail = [&](const std::string& why) { return ringattn::FileError(what + " " + path + ": " + why); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO: no wait for a writer
  if (fd < 0) throw fail(std::string("cannot open (") + std::strerror(errno) + ")");
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_it{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw fail(std::string("cannot stat (") + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) throw fail("not a regular file (a FIFO, a device or a directory): give the path of a file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes)
    throw fail(std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) + " this reader takes");
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

}  // namespace infer
