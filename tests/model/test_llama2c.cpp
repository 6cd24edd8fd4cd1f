// A real pretrained model through the model runtime's layers (infer/model/model.hpp):
// stories260K read from its llama2.c checkpoint, run greedily from "Once upon a time" with
// dense causal attention computed here in float64 (the ring's part, stood in for by the
// oracle's math), gives exactly the 60 tokens llama2.c's run.c generated
// (../shared/models/stories260K/README.md), and the real checkpoint altered is refused.
// Every case needs the model (hostile checkpoints: test_hostile_files.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <unistd.h>
#include <span>
#include <vector>

#include "model/model.hpp"
#include "job/sampler.hpp"
#include "tokenizers/tokenizer.hpp"
#include "tests/error_of.hpp"
#include "tests/model/model_files.hpp"

namespace fs = std::filesystem;
using infer::Model;

using ringattn::test::error_of;

namespace {

// Dense causal attention with GQA in float64: o [n, heads*head_dim] from q, k, v.
void causal_attention(const infer::ModelConfig& c, const std::vector<float>& q, const std::vector<float>& k,
                      const std::vector<float>& v, std::int64_t n, std::vector<float>& o) {
  const std::int64_t H = c.heads, KV = c.kv_heads, D = c.head_dim, group = H / KV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> s(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / group;
      double m = -INFINITY;
      for (std::int64_t j = 0; j <= r; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d)
          dot += static_cast<double>(q[static_cast<std::size_t>((r * H + h) * D + d)]) *
                 k[static_cast<std::size_t>((j * KV + g) * D + d)];
        s[static_cast<std::size_t>(j)] = dot * scale;
        m = std::max(m, s[static_cast<std::size_t>(j)]);
      }
      double l = 0;
      for (std::int64_t j = 0; j <= r; ++j) l += (s[static_cast<std::size_t>(j)] = std::exp(s[static_cast<std::size_t>(j)] - m));
      for (std::int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (std::int64_t j = 0; j <= r; ++j)
          acc += s[static_cast<std::size_t>(j)] * v[static_cast<std::size_t>((j * KV + g) * D + d)];
        o[static_cast<std::size_t>((r * H + h) * D + d)] = static_cast<float>(acc / l);
      }
    }
}

// The logits of the last token after the whole sequence `tokens`, at positions 0..n-1.
std::vector<float> last_logits(const Model& m, const std::vector<std::int32_t>& tokens) {
  const auto& c = m.config();
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  std::vector<float> x(static_cast<std::size_t>(n * c.dim));
  m.embed(tokens, x);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) pos[static_cast<std::size_t>(i)] = i;
  std::vector<float> q(static_cast<std::size_t>(n * c.heads * c.head_dim)), o(q.size());
  std::vector<float> k(static_cast<std::size_t>(n * c.kv_heads * c.head_dim)), v(k.size());
  for (int l = 0; l < c.layers; ++l) {
    m.attention_inputs(l, x, pos, q, k, v);
    causal_attention(c, q, k, v, n, o);
    m.attention_output_and_mlp(l, o, x);
  }
  std::vector<float> logits(static_cast<std::size_t>(c.vocab));
  m.logits(std::span<const float>(x).subspan(static_cast<std::size_t>((n - 1) * c.dim), static_cast<std::size_t>(c.dim)),
           logits);
  return logits;
}

// Token by token with a KV cache (float64 attention over it): what run.c's loop does.
// Returns the tokens after `prompt` until `steps` positions are used or BOS is chosen.
std::vector<int> generate(const Model& m, const std::vector<int>& prompt, int steps, infer::Sampler& sampler) {
  const auto& c = m.config();
  const std::int64_t H = c.heads, KV = c.kv_heads, D = c.head_dim, group = H / KV;
  std::vector<std::vector<float>> kc(static_cast<std::size_t>(c.layers)), vc(kc.size());
  std::vector<float> x(static_cast<std::size_t>(c.dim)), q(static_cast<std::size_t>(H * D)), o(q.size());
  std::vector<float> k(static_cast<std::size_t>(KV * D)), v(k.size()), logits(static_cast<std::size_t>(c.vocab));
  std::vector<int> out;
  int token = prompt[0];
  for (int pos = 0; pos < steps; ++pos) {
    const std::int32_t t32 = token;
    m.embed(std::span<const std::int32_t>(&t32, 1), x);
    const std::int64_t p64 = pos;
    for (int l = 0; l < c.layers; ++l) {
      m.attention_inputs(l, x, std::span<const std::int64_t>(&p64, 1), q, k, v);
      auto& K = kc[static_cast<std::size_t>(l)];
      auto& V = vc[static_cast<std::size_t>(l)];
      K.insert(K.end(), k.begin(), k.end());
      V.insert(V.end(), v.begin(), v.end());
      const std::int64_t n = pos + 1;
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t g = h / group;
        std::vector<double> s(static_cast<std::size_t>(n));
        double most = -INFINITY, l_sum = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d)
            dot += static_cast<double>(q[static_cast<std::size_t>(h * D + d)]) * K[static_cast<std::size_t>((j * KV + g) * D + d)];
          s[static_cast<std::size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
          most = std::max(most, s[static_cast<std::size_t>(j)]);
        }
        for (auto& e : s) l_sum += (e = std::exp(e - most));
        for (std::int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (std::int64_t j = 0; j < n; ++j) acc += s[static_cast<std::size_t>(j)] * V[static_cast<std::size_t>((j * KV + g) * D + d)];
          o[static_cast<std::size_t>(h * D + d)] = static_cast<float>(acc / l_sum);
        }
      }
      m.attention_output_and_mlp(l, o, x);
    }
    int next;
    if (pos + 1 < static_cast<int>(prompt.size())) {
      next = prompt[static_cast<std::size_t>(pos) + 1];
    } else {
      m.logits(x, logits);
      next = sampler.next(logits);
      if (next == infer::Tokenizer::kBos) break;
      out.push_back(next);
    }
    token = next;
  }
  return out;
}

}  // namespace

TEST_CASE("llama2c: stories260K's header gives its configuration, interleaved RoPE, tied classifier") {
  const auto dir = test::model_dir();
  if (!dir) return;
  const Model m = Model::from_llama2c((*dir / "stories260K.bin").string());
  const auto& c = m.config();
  CHECK(c.dim == 64);
  CHECK(c.ffn == 172);
  CHECK(c.layers == 5);
  CHECK(c.heads == 8);
  CHECK(c.kv_heads == 4);
  CHECK(c.head_dim == 8);
  CHECK(c.vocab == 512);
  CHECK(c.tied);
  CHECK(c.context == 512);
  CHECK(c.rope_style == infer::RopeStyle::interleaved);
}

TEST_CASE("llama2c: the model's digest is the same on every load and changes with one weight") {
  const auto dir = test::model_dir();
  if (!dir) return;
  const std::string path = (*dir / "stories260K.bin").string();
  const Model a = Model::from_llama2c(path), b = Model::from_llama2c(path);
  CHECK(a.digest() == b.digest());
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 1000);
  bytes[bytes.size() / 2] ^= 0x01;  // one weight's lowest mantissa bit
  const auto other = std::filesystem::temp_directory_path() / ("ringattn-digest-" + std::to_string(::getpid()) + ".bin");
  std::ofstream(other, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const Model c = Model::from_llama2c(other.string());
  std::filesystem::remove(other);
  CHECK(c.digest() != a.digest());
  const auto tok = infer::Tokenizer::load((*dir / "tok512.bin").string(), 512);
  CHECK(tok.digest() == infer::Tokenizer::load((*dir / "tok512.bin").string(), 512).digest());
  CHECK(tok.digest() != a.digest());
}

TEST_CASE("llama2c: greedy from \"Once upon a time\" is llama2.c's 60 tokens, token for token") {
  const auto dir = test::model_dir();
  if (!dir) return;
  const Model m = Model::from_llama2c((*dir / "stories260K.bin").string());
  std::vector<std::int32_t> tokens(test::kPromptIds.begin(), test::kPromptIds.end());
  while (tokens.size() < 1 + test::kRunIds.size()) {
    const std::vector<float> logits = last_logits(m, tokens);
    std::int32_t best = 0;  // the first of equal maxima, as run.c's argmax
    for (std::int32_t i = 1; i < static_cast<std::int32_t>(logits.size()); ++i)
      if (logits[static_cast<std::size_t>(i)] > logits[static_cast<std::size_t>(best)]) best = i;
    tokens.push_back(best);
  }
  const std::vector<int> got(tokens.begin() + 1, tokens.end());
  CHECK(got == test::kRunIds);
}

TEST_CASE("llama2c: token by token with a KV cache, greedy 256 steps is llama2.c's recorded sample") {
  const auto dir = test::model_dir();
  if (!dir) return;
  const Model m = Model::from_llama2c((*dir / "stories260K.bin").string());
  const infer::Tokenizer tok = infer::Tokenizer::load((*dir / "tok512.bin").string(), test::kVocab);
  infer::Sampler greedy(0, 0.9f, 1);
  const std::vector<int> prompt = tok.encode("Once upon a time", true, false);
  std::vector<int> all(prompt.begin() + 1, prompt.end());
  const std::vector<int> gen = generate(m, prompt, 64, greedy);
  all.insert(all.end(), gen.begin(), gen.end());
  CHECK(all == test::kRunIds);
  // run.c with no prompt (BOS alone) for its default 256 steps: the same story, longer.
  infer::Sampler greedy2(0, 0.9f, 1);
  const std::vector<int> story = generate(m, {infer::Tokenizer::kBos}, 256, greedy2);
  CHECK(tok.text(story) + "\n" == test::kGreedy256Text);
}

TEST_CASE("llama2c: seeded sampling (-t 1.0 -p 0.9 -s 133742) is llama2.c's recorded sample") {
  const auto dir = test::model_dir();
  if (!dir) return;
  const Model m = Model::from_llama2c((*dir / "stories260K.bin").string());
  const infer::Tokenizer tok = infer::Tokenizer::load((*dir / "tok512.bin").string(), test::kVocab);
  infer::Sampler sampler(1.0f, 0.9f, 133742);
  const std::vector<int> story = generate(m, {infer::Tokenizer::kBos}, 256, sampler);  // stops at BOS
  CHECK(tok.text(story) + "\n" == test::kSeededText);
}

TEST_CASE("llama2c: stories260K with its classifier claimed separate (a size that no longer fits) or a NaN gain is refused") {
  const auto dir = test::model_dir();
  if (!dir) return;
  auto refused = [](const std::string& name, const std::string& bytes) {
    const fs::path p = fs::temp_directory_path() / ("ringattn-l2c-" + std::to_string(::getpid()) + "-" + name);
    std::ofstream(p, std::ios::binary) << bytes;
    const std::string m = error_of([&] { Model::from_llama2c(p.string()); });
    fs::remove(p);
    return m;
  };
  std::ifstream f(*dir / "stories260K.bin", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::int32_t untied = -512;
  std::memcpy(bytes.data() + 20, &untied, 4);
  CHECK(refused("untied", bytes).find("separate classifier) is 1187612") != std::string::npos);
  float nan = std::nanf("");
  std::memcpy(bytes.data() + 20, &test::kVocab, 4);
  std::memcpy(bytes.data() + 28 + 4 * 32768 + 4 * 3, &nan, 4);  // the 4th gain of layer 0's attention norm
  CHECK(refused("nan", bytes).find("rms_att_weight of layer 0 holds NaN or inf") != std::string::npos);
}
