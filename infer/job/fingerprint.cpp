// infer — the whole model's fingerprint (fingerprint.hpp).
#include "fingerprint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>

#include <ringattn/error.hpp>

#include "../common/digest.hpp"
#include "../formats/gguf.hpp"
#include "../formats/hf_weights.hpp"
#include "../model/model.hpp"
#include "model_files.hpp"

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

// A file's size, its first kSample bytes and kSamples - 1 more spread evenly over it, read
// by read(at, n, buf) (n <= kSample).
template <class Read>
void sample(Fnv1a& h, std::uint64_t size, Read read) {
  h.value(size);
  std::vector<char> buf(kSample);
  for (int i = 0; i < kSamples; ++i) {
    const std::uint64_t span = size > kSample ? size - kSample : 0;
    const std::uint64_t at = span * static_cast<std::uint64_t>(i) / (kSamples - 1);
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kSample, size - std::min(size, at)));
    read(at, want, buf.data());
    h.bytes(buf.data(), want);
    if (span == 0) break;  // one sample holds the whole file
  }
}

void sample_file(Fnv1a& h, const std::string& path) {
  const Fd fd(path);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw ringattn::FileError("model " + path + ": not a regular file to fingerprint");
  sample(h, static_cast<std::uint64_t>(st.st_size), [&](std::uint64_t at, std::size_t want, char* buf) {
    std::size_t got = 0;
    while (got < want) {
      const ssize_t n = ::pread(fd.get(), buf + got, want - got, static_cast<off_t>(at + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw ringattn::FileError("model " + path + ": a read to fingerprint it failed at byte " + std::to_string(at + got));
      got += static_cast<std::size_t>(n);
    }
  });
}

// The same of a file held in memory (mapped by the loader): the same value as sample_file.
void sample_bytes(Fnv1a& h, std::span<const std::byte> bytes) {
  sample(h, bytes.size(), [&](std::uint64_t at, std::size_t want, char* buf) { std::memcpy(buf, bytes.data() + at, want); });
}

}  // namespace

std::uint64_t files_fingerprint(const std::vector<std::string>& files) {
  Fnv1a h;
  for (const std::string& f : files) sample_file(h, f);
  return h.h;
}

std::uint64_t model_fingerprint(const JobOptions& opt, ModelFiles& files, const ModelConfig& c) {
  // The files' samples, in one hash: a GGUF file and a Hugging Face directory's config.json
  // and safetensors as the load holds them (no file opened again), the others by path.
  Fnv1a samples;
  bool any = true;
  if (!opt.hf.empty()) {
    const std::vector<char>& config = files.hf_config().bytes;
    sample_bytes(samples, std::as_bytes(std::span(config.data(), config.size())));
    for (const SafetensorsFile* shard : files.hf_weights().files()) sample_bytes(samples, shard->bytes());
  } else if (!opt.gguf.empty()) {
    sample_bytes(samples, files.gguf().bytes());
  } else if (!opt.llama2c.empty()) {
    sample_file(samples, opt.llama2c);
  } else if (!opt.weights.empty()) {
    sample_file(samples, opt.weights);
  } else {
    any = false;
  }
  Fnv1a h;
  h.value(samples.h);
  if (!any) h.value(opt.seed);
  h.bytes(c.architecture.data(), c.architecture.size());
  for (const std::int64_t v : {c.vocab, c.dim, c.layers, c.heads, c.kv_heads, c.head_dim, c.ffn, c.context}) h.value(v);
  h.value(c.tied);
  h.value(c.rope_theta);
  h.value(static_cast<int>(opt.weights_dtype ? static_cast<int>(*opt.weights_dtype) : -1));
  if (opt.activations != ringattn::Activations::int8) h.value(static_cast<int>(opt.activations));  // ranks must agree
  return h.h;
}

}  // namespace infer
