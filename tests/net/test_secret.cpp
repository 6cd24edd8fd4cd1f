// Loading the shared secret: where it comes from, and every way a token is refused
// (too short, a file others can read, not a regular file, too large).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>

#include "net/secret.hpp"
#include "ringattn/error.hpp"

using namespace ringattn;
using namespace ringattn::net;

namespace {

constexpr const char* kGoodToken = "0123456789abcdef0123456789abcdef";

// A private scratch directory, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ringattn_secret_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes `content` to `path` and sets its mode exactly (no umask in the way).
std::string write_token(const std::string& path, const std::string& content, mode_t mode = 0600) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  ::close(fd);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

// Sets RINGATTN_TOKEN (or unsets it, for nullopt) and restores the old value on exit.
class TokenEnv {
 public:
  explicit TokenEnv(std::optional<std::string> value) {
    if (const char* old = std::getenv(kTokenEnv)) old_ = old;
    if (value)
      ::setenv(kTokenEnv, value->c_str(), 1);
    else
      ::unsetenv(kTokenEnv);
  }
  TokenEnv(const TokenEnv&) = delete;
  TokenEnv& operator=(const TokenEnv&) = delete;
  ~TokenEnv() {
    if (old_)
      ::setenv(kTokenEnv, old_->c_str(), 1);
    else
      ::unsetenv(kTokenEnv);
  }

 private:
  std::optional<std::string> old_;
};

// load_secret(path) must throw InvalidArgument whose message holds every one of `words`.
void check_refused(const std::string& path, std::initializer_list<std::string> words) {
  try {
    (void)load_secret(path);
    FAIL("accepted token file " << path);
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    INFO("message: " << what);
    for (const auto& w : words) CHECK(what.find(w) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("secret: a token file or RINGATTN_TOKEN, trailing whitespace stripped") {
  ScratchDir dir;
  const TokenEnv env(std::nullopt);
  CHECK(load_secret(write_token(dir.file("t"), std::string(kGoodToken) + "\n")) == kGoodToken);
  CHECK(load_secret(write_token(dir.file("crlf"), std::string(kGoodToken) + " \t\r\n\n")) == kGoodToken);
  CHECK(load_secret(write_token(dir.file("bare"), kGoodToken)) == kGoodToken);
  {
    const TokenEnv with(std::string(kGoodToken) + "\n");
    CHECK(load_secret() == kGoodToken);
    CHECK(load_secret(dir.file("t")) == kGoodToken);  // the file wins over the environment
  }
  check_refused(dir.file("missing"), {"missing", "No such file"});
  try {
    (void)load_secret();
    FAIL("no secret accepted");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find(kTokenEnv) != std::string::npos);
  }
}

TEST_CASE("secret: shorter than 16 bytes is refused from either source, saying how long and how to fix it") {
  ScratchDir dir;
  {
    const TokenEnv env(std::string("short-secret\n"));  // 12 bytes once the newline is gone
    try {
      (void)load_secret();
      FAIL("short RINGATTN_TOKEN accepted");
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      INFO("message: " << what);
      CHECK(what.find(kTokenEnv) != std::string::npos);
      CHECK(what.find("12 bytes") != std::string::npos);
      CHECK(what.find("16") != std::string::npos);
      CHECK(what.find("/dev/urandom") != std::string::npos);
    }
  }
  check_refused(write_token(dir.file("short"), "fifteen-bytes!!\n"), {"short", "15 bytes", "16", "/dev/urandom"});
  const TokenEnv env(std::string("0123456789abcdef"));  // exactly 16: the least accepted
  CHECK(load_secret() == "0123456789abcdef");
}

TEST_CASE("secret: a token file that group or others can access is refused, like an ssh key") {
  ScratchDir dir;
  for (mode_t mode : {0644, 0640, 0604, 0660, 0620, 0666}) {
    CAPTURE(mode);
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    const std::string path = write_token(dir.file("open"), kGoodToken, mode);
    check_refused(path, {path, octal, "chmod 600"});
  }
  CHECK(load_secret(write_token(dir.file("owner_rw"), kGoodToken, 0600)) == kGoodToken);
  CHECK(load_secret(write_token(dir.file("owner_r"), kGoodToken, 0400)) == kGoodToken);
}

TEST_CASE("secret: a token file that is not a regular file is refused without reading or blocking") {
  ScratchDir dir;
  const auto start = std::chrono::steady_clock::now();
  check_refused("/dev/zero", {"/dev/zero", "character device"});
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));

  const std::string sub = dir.file("dir");
  REQUIRE(::mkdir(sub.c_str(), 0700) == 0);
  check_refused(sub, {sub, "directory"});

  // A FIFO with no writer: a blocking open would wait forever.
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto fifo_start = std::chrono::steady_clock::now();
  check_refused(fifo, {fifo, "FIFO"});
  CHECK(std::chrono::steady_clock::now() - fifo_start < std::chrono::seconds(1));
}

TEST_CASE("secret: a token file over 4 KiB is refused") {
  ScratchDir dir;
  const std::string big = write_token(dir.file("big"), std::string(5 * 1024, 'a'));
  check_refused(big, {big, "5120 bytes", "4096"});
  // The limit is on the file: 4 KiB exactly is still one (long) secret.
  CHECK(load_secret(write_token(dir.file("edge"), std::string(4096, 'b'))).size() == 4096);
}

TEST_CASE("secret: generate_secret gives 32 fresh random bytes in hex that load_secret accepts") {
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    const std::string s = generate_secret();
    CHECK(s.size() == 64);
    CHECK(s.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(s);
    const TokenEnv env(s);
    CHECK(load_secret() == s);
  }
  CHECK(seen.size() == 4);
}
