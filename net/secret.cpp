// Loading and generating the shared secret.
#include "net/secret.hpp"

#include <sys/random.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ringattn/error.hpp"
#include "ringattn/log.hpp"

namespace ringattn::net {
namespace {

constexpr std::size_t kMinSecretBytes = 16;

std::string strip_trailing_space(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

std::string read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument("cannot read token file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    logger("net")->warn("token file '{}' is readable by group or others (chmod 600 it)", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return strip_trailing_space(ss.str());
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
  if (secret.size() < kMinSecretBytes)
    logger("net")->warn("the shared secret from {} is only {} bytes; use at least {} random bytes", source,
                        secret.size(), kMinSecretBytes);
  return secret;
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
