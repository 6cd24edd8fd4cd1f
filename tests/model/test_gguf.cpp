// GGUF files (infer/gguf.hpp, gguf_config.hpp) written here byte by byte: a well-formed one
// loads; hostile headers, metadata and tensor tables are refused naming the key or the
// tensor, nothing read past the end. (The seed's model as GGUF against the seed's own:
// deploy/test_embedding.sh; random inputs: tests/fuzz/fuzz_gguf.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include <ringattn/error.hpp>

#include "gguf.hpp"
#include "gguf_config.hpp"
#include "model.hpp"
#include "tests/error_of.hpp"

namespace fs = std::filesystem;
using infer::GgufFile;
using ringattn::test::error_of;

namespace {

// A GGUF v3 file assembled from parts; each part may be edited by a test before writing.
struct Gguf {
  std::uint32_t version = 3;
  std::string meta;  // encoded key/value pairs
  std::uint64_t keys = 0;
  std::string infos, data;
  std::uint64_t tensors = 0;

  template <class T>
  static std::string le(T v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof v);
  }
  static std::string str(const std::string& s) { return le<std::uint64_t>(s.size()) + s; }
  void u32(const std::string& k, std::uint32_t v) { meta += str(k) + le<std::uint32_t>(4) + le(v), ++keys; }
  void f32(const std::string& k, float v) { meta += str(k) + le<std::uint32_t>(6) + le(v), ++keys; }
  void text(const std::string& k, const std::string& v) { meta += str(k) + le<std::uint32_t>(8) + str(v), ++keys; }
  // A tensor of ggml type `type` with dims innermost first and raw data (padded to 32).
  void tensor(const std::string& name, std::vector<std::uint64_t> ne, std::uint32_t type, const std::string& bytes) {
    infos += str(name) + le<std::uint32_t>(static_cast<std::uint32_t>(ne.size()));
    for (auto n : ne) infos += le(n);
    infos += le(type) + le<std::uint64_t>(data.size());
    data += bytes + std::string((32 - bytes.size() % 32) % 32, '\0');
    ++tensors;
  }
  void f32_tensor(const std::string& name, std::vector<std::uint64_t> ne, float value = 0.01f) {
    std::uint64_t n = 1;
    for (auto x : ne) n *= x;
    std::string b;
    for (std::uint64_t i = 0; i < n; ++i) b += le(value);
    tensor(name, ne, 0, b);
  }
  std::string bytes() const {
    std::string head = "GGUF" + le(version) + le(tensors) + le(keys) + meta + infos;
    head += std::string((32 - head.size() % 32) % 32, '\0');
    return head + data;
  }
};

// A small llama: dim 8, 1 layer, 2 heads of 4 (1 KV head), MLP 8, vocab 16, tied.
Gguf llama() {
  Gguf g;
  g.text("general.architecture", "llama");
  g.u32("llama.embedding_length", 8);
  g.u32("llama.block_count", 1);
  g.u32("llama.feed_forward_length", 8);
  g.u32("llama.attention.head_count", 2);
  g.u32("llama.attention.head_count_kv", 1);
  g.u32("llama.vocab_size", 16);
  g.u32("llama.context_length", 64);
  g.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  g.f32("llama.rope.freq_base", 10000.0f);
  g.f32_tensor("token_embd.weight", {8, 16});
  g.f32_tensor("blk.0.attn_norm.weight", {8}, 1.0f);
  g.f32_tensor("blk.0.attn_q.weight", {8, 8});
  g.f32_tensor("blk.0.attn_k.weight", {8, 4});
  g.f32_tensor("blk.0.attn_v.weight", {8, 4});
  g.f32_tensor("blk.0.attn_output.weight", {8, 8});
  g.f32_tensor("blk.0.ffn_norm.weight", {8}, 1.0f);
  g.f32_tensor("blk.0.ffn_gate.weight", {8, 8});
  g.f32_tensor("blk.0.ffn_up.weight", {8, 8});
  g.f32_tensor("blk.0.ffn_down.weight", {8, 8});
  g.f32_tensor("output_norm.weight", {8}, 1.0f);
  return g;
}

struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& bytes)
      : path(fs::temp_directory_path() / ("ringattn-gguf-" + std::to_string(::getpid()) + ".gguf")) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { fs::remove(path); }
};

std::string load_error(const std::string& bytes) {
  TempFile f(bytes);
  return error_of([&] { infer::Model::from_gguf(f.path.string()); });
}

}  // namespace

TEST_CASE("gguf: a well-formed llama file loads, its configuration from the metadata") {
  TempFile f(llama().bytes());
  const infer::Model m = infer::Model::from_gguf(f.path.string());
  CHECK(m.config().architecture == "llama");
  CHECK(m.config().dim == 8);
  CHECK(m.config().head_dim == 4);
  CHECK(m.config().kv_heads == 1);
  CHECK(m.config().tied);
  CHECK(m.config().rope_style == infer::RopeStyle::interleaved);  // llama.cpp's q/k row order
  CHECK(m.matrices_dtype() == ringattn::DType::f32);
}

TEST_CASE("gguf: hostile headers, metadata and tensor tables are refused, naming what is wrong") {
  struct Case {
    std::function<void(Gguf&)> edit;
    const char* want;
  };
  const Case cases[] = {
      {[](Gguf& g) { g.version = 1; }, "GGUF version 1: versions 2 and 3 are read"},
      {[](Gguf& g) { g.keys = 1u << 30; }, "more than 2^24"},
      {[](Gguf& g) { g.meta += Gguf::str("big") + Gguf::le<std::uint32_t>(9) + Gguf::le<std::uint32_t>(4) +
                              Gguf::le<std::uint64_t>(1u << 20), ++g.keys; },
       "big runs past the end of the file"},
      {[](Gguf& g) { g.meta += Gguf::str("x") + Gguf::le<std::uint32_t>(8) + Gguf::le<std::uint64_t>(1ull << 40), ++g.keys; },
       "a string of 1099511627776 bytes"},
      {[](Gguf& g) { g.meta += Gguf::str("x") + Gguf::le<std::uint32_t>(77), ++g.keys; }, "x: unknown value type 77"},
      {[](Gguf& g) { g.u32("llama.block_count", 2); }, "metadata key llama.block_count appears twice"},
      {[](Gguf& g) { g.text("general.architecture", "gpt2"); }, "appears twice"},
      {[](Gguf& g) { g.tensor("bad", {0, 4}, 0, ""); }, "tensor \"bad\": dimension 0"},
      {[](Gguf& g) { g.tensor("bad", {4}, 99, std::string(16, '\0')); }, "ggml type 99 is not read"},
      {[](Gguf& g) { g.tensor("q", {16, 2}, 8, std::string(34, '\0')); }, "a row of 16 is not whole Q8_0 blocks"},
      {[](Gguf& g) { g.tensor("q", {32, 2}, 8, std::string(68, '\0')); }, "\"q\" is not part of the model"},
      {[](Gguf& g) { g.data.resize(g.data.size() - 64); }, "outside the file"},
      {[](Gguf& g) { g.u32("general.alignment", 3); }, "general.alignment 3 is not a power of two"},
  };
  for (const Case& k : cases) {
    CAPTURE(std::string(k.want));
    Gguf g = llama();
    k.edit(g);
    const std::string e = load_error(g.bytes());
    CAPTURE(e);
    CHECK(e.find(k.want) != std::string::npos);
  }
  CHECK(load_error("GGUX").find("no \"GGUF\" magic") != std::string::npos);
  CHECK(load_error("GG").find("runs past the end") != std::string::npos);
  CHECK(load_error(llama().bytes().substr(0, 300)).find("runs past the end of the file") != std::string::npos);
}

TEST_CASE("gguf: metadata the runtime does not implement, or that does not fit the tensors, is refused") {
  struct Case {
    std::function<void(Gguf&)> edit;
    const char* want;
  };
  const auto replace = [](Gguf& g, const std::string& key, const std::string& encoded_value) {
    const std::string k = Gguf::str(key);
    const auto at = g.meta.find(k);
    REQUIRE(at != std::string::npos);
    const std::size_t value_at = at + k.size();
    std::uint64_t n = 0;
    if (g.meta[value_at] == 8) std::memcpy(&n, &g.meta[value_at + 4], 8);
    const std::size_t len = g.meta[value_at] == 8 ? 4 + 8 + n : 8;  // (u32 and f32 values: type + 4 bytes)
    g.meta.replace(value_at, len, encoded_value);
  };
  const Case cases[] = {
      {[&](Gguf& g) { replace(g, "general.architecture", Gguf::le<std::uint32_t>(8) + Gguf::str("gpt2")); },
       "general.architecture \"gpt2\" is not one this runtime implements"},
      {[&](Gguf& g) { replace(g, "llama.embedding_length", Gguf::le<std::uint32_t>(8) + Gguf::str("8")); },
       "metadata llama.embedding_length must be an integer"},
      {[&](Gguf& g) { replace(g, "llama.attention.head_count_kv", Gguf::le<std::uint32_t>(4) + Gguf::le<std::uint32_t>(3)); },
       "head_count_kv 3 does not divide head_count 2"},
      {[&](Gguf& g) { g.u32("llama.rope.dimension_count", 2); }, "partial RoPE is not implemented"},
      {[&](Gguf& g) { g.text("llama.rope.scaling.type", "yarn"); }, "rope.scaling.type \"yarn\" is not implemented"},
      {[&](Gguf& g) { replace(g, "llama.vocab_size", Gguf::le<std::uint32_t>(4) + Gguf::le<std::uint32_t>(17)); },
       "tensor \"token_embd.weight\" has shape [16, 8], the model's configuration needs [17, 8]"},
      {[&](Gguf& g) { g.f32_tensor("blk.0.attn_q.bias", {8}); }, "\"blk.0.attn_q.bias\" is not part of the model"},
  };
  for (const Case& k : cases) {
    CAPTURE(std::string(k.want));
    Gguf g = llama();
    k.edit(g);
    CHECK(load_error(g.bytes()).find(k.want) != std::string::npos);
  }
  Gguf g = llama();
  g.f32_tensor("output.weight", {8, 16}, NAN);
  CHECK(load_error(g.bytes()).find("tensor \"output.weight\" holds NaN or inf") != std::string::npos);
}
