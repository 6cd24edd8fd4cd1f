// Loading and generating the shared secret.
//
// The token file is treated like an ssh private key: it must be a regular file that only
// its owner can access, and it is small. Everything is checked on the opened descriptor
// (fstat, not stat on the path) so the file that is checked is the file that is read,
// and it is opened non-blocking so that a FIFO in its place fails instead of hanging.
#include "net/secret.hpp"

#include "net/crypto.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ringattn/error.hpp"

namespace ringattn::net {
namespace {

constexpr std::size_t kMinSecretBytes = 16;
constexpr std::size_t kMaxTokenFileBytes = 4096;
constexpr const char* kHowToMake =
    "make a random one with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > FILE && chmod 600 FILE";

std::string strip_trailing_space(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string read_token_file(const std::string& path) {
  const std::string name = "token file '" + path + "'";
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) throw InvalidArgument("cannot open " + name + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw InvalidArgument("cannot stat " + name + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw InvalidArgument(name + " is " + file_kind(st.st_mode) + ", not a regular file; " + kHowToMake);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    throw InvalidArgument(name + " has mode " + octal_mode(st.st_mode) +
                          ", so group or others can access the ring's secret; run: chmod 600 " + path);
  if (st.st_size > static_cast<off_t>(kMaxTokenFileBytes))
    throw InvalidArgument(name + " is " + std::to_string(st.st_size) + " bytes; a token file holds one secret of at most " +
                          std::to_string(kMaxTokenFileBytes) + " bytes");
  // Read one byte past the limit so a file that grew since fstat is still refused.
  std::string data(kMaxTokenFileBytes + 1, '\0');
  std::size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::read(fd.get(), data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InvalidArgument("cannot read " + name + ": " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxTokenFileBytes)
    throw InvalidArgument(name + " is longer than " + std::to_string(kMaxTokenFileBytes) +
                          " bytes; a token file holds one secret");
  data.resize(got);
  return strip_trailing_space(std::move(data));
}

}  // namespace

std::string load_secret(const std::string& token_file) {
  std::string secret, source;
  if (!token_file.empty()) {
    secret = read_token_file(token_file);
    source = "token file '" + token_file + "'";
  } else if (const char* env = std::getenv(kTokenEnv)) {
    secret = strip_trailing_space(env);
    source = std::string("environment variable ") + kTokenEnv;
  }
  if (secret.empty())
    throw InvalidArgument(std::string("no shared secret: pass a token file or set ") + kTokenEnv +
                          (source.empty() ? "" : " (" + source + " is empty)"));
  return checked_secret(std::move(secret), source);
}

std::string checked_secret(std::string secret, const std::string& source) {
  if (secret.size() < kMinSecretBytes)
    throw InvalidArgument("the shared secret from " + source + " is " + std::to_string(secret.size()) +
                          " bytes; it must be at least " + std::to_string(kMinSecretBytes) +
                          " (a captured handshake lets anyone guess a short one offline); " + kHowToMake);
  return secret;
}

std::string secret_fingerprint(const std::string& secret) {
  static constexpr std::string_view kLabel = "ringattn token fingerprint v1";
  const Digest256 d = hmac_sha256(std::as_bytes(std::span(secret.data(), secret.size())),
                                  {std::as_bytes(std::span(kLabel.data(), kLabel.size()))});
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < 8; ++i) {
    out += kHex[std::to_integer<unsigned>(d[i]) >> 4];
    out += kHex[std::to_integer<unsigned>(d[i]) & 15u];
  }
  return out;
}

std::string generate_secret() {
  std::array<std::byte, 32> raw{};
  fill_random(raw);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::byte b : raw) {
    out += kHex[std::to_integer<unsigned>(b) >> 4];
    out += kHex[std::to_integer<unsigned>(b) & 15u];
  }
  return out;
}

void fill_random(std::span<std::byte> out) {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::getrandom(out.data() + got, out.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw NetworkError(std::string("getrandom failed: ") + std::strerror(errno));
    }
    got += static_cast<std::size_t>(n);
  }
}

}  // namespace ringattn::net
