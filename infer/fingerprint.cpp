// infer — the whole model's fingerprint (fingerprint.hpp).
#include "fingerprint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <ringattn/error.hpp>

#include "digest.hpp"
#include "model.hpp"

namespace infer {
namespace {

constexpr std::size_t kSample = 64 * 1024;
constexpr int kSamples = 64;  // the first 64 KiB, then 63 more spread evenly

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw ringattn::FileError("model " + path + ": cannot open it to fingerprint it: " + std::strerror(errno));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void sample(Fnv1a& h, const std::string& path) {
  const Fd fd(path);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw ringattn::FileError("model " + path + ": not a regular file to fingerprint");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  h.value(size);
  std::vector<char> buf(kSample);
  for (int i = 0; i < kSamples; ++i) {
    const std::uint64_t span = size > kSample ? size - kSample : 0;
    const std::uint64_t at = span * static_cast<std::uint64_t>(i) / (kSamples - 1);
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kSample, size - std::min(size, at)));
    std::size_t got = 0;
    while (got < want) {
      const ssize_t n = ::pread(fd.get(), buf.data() + got, want - got, static_cast<off_t>(at + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw ringattn::FileError("model " + path + ": a read to fingerprint it failed at byte " + std::to_string(at + got));
      got += static_cast<std::size_t>(n);
    }
    h.bytes(buf.data(), got);
    if (span == 0) break;  // one sample holds the whole file
  }
}

}  // namespace

std::uint64_t files_fingerprint(const std::vector<std::string>& files) {
  Fnv1a h;
  for (const std::string& f : files) sample(h, f);
  return h.h;
}

std::uint64_t model_fingerprint(const JobOptions& opt, const ModelConfig& c) {
  std::vector<std::string> files;
  if (!opt.hf.empty()) {
    files.push_back((std::filesystem::path(opt.hf) / "config.json").string());
    std::vector<std::string> shards;
    for (const auto& e : std::filesystem::directory_iterator(opt.hf))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") shards.push_back(e.path().string());
    std::sort(shards.begin(), shards.end());
    files.insert(files.end(), shards.begin(), shards.end());
  } else if (!opt.gguf.empty()) {
    files.push_back(opt.gguf);
  } else if (!opt.llama2c.empty()) {
    files.push_back(opt.llama2c);
  } else if (!opt.weights.empty()) {
    files.push_back(opt.weights);
  }
  Fnv1a h;
  h.value(files_fingerprint(files));
  if (files.empty()) h.value(opt.seed);
  h.bytes(c.architecture.data(), c.architecture.size());
  for (const std::int64_t v : {c.vocab, c.dim, c.layers, c.heads, c.kv_heads, c.head_dim, c.ffn, c.context}) h.value(v);
  h.value(c.tied);
  h.value(c.rope_theta);
  h.value(static_cast<int>(opt.weights_dtype ? static_cast<int>(*opt.weights_dtype) : -1));
  return h.h;
}

}  // namespace infer
