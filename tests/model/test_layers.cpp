// The model's per-token layers (infer/model/model.hpp) on seeded weights: a row's result is bitwise
// the same computed alone, in a batch of any size and on any thread count (batch invariance:
// what makes greedy text the same at every P and layout), and the layers agree with a plain
// float64 evaluation of the same weights (tools/write_weights.py's numbers, drawn here by the
// model's own generator). No model files needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "model/model.hpp"

using infer::Model;
using infer::ModelConfig;

namespace {

ModelConfig small() {
  ModelConfig c;
  c.vocab = 300;
  c.dim = 96;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 24;
  c.ffn = 200;  // neither a multiple of 32: ragged panels
  return c;
}

// One layer's inputs and outputs for `tokens` at `positions`: (q, k, v) of layer 0, then
// the hidden rows after layer 0's output and MLP with o := q's first kv columns, then logits.
struct Pass {
  std::vector<float> q, k, v, h, logits;
};
Pass run(const Model& m, std::span<const std::int32_t> tokens, std::span<const std::int64_t> positions) {
  const ModelConfig& c = m.config();
  const std::size_t n = tokens.size(), qd = std::size_t(c.heads * c.head_dim),
                    kd = std::size_t(c.kv_heads * c.head_dim);
  Pass p{std::vector<float>(n * qd), std::vector<float>(n * kd), std::vector<float>(n * kd),
         std::vector<float>(n * std::size_t(c.dim)), std::vector<float>(n * std::size_t(c.vocab))};
  m.embed(tokens, p.h);
  m.attention_inputs(0, p.h, positions, p.q, p.k, p.v);
  m.attention_output_and_mlp(0, p.q, p.h);  // q stands in for the attention's output
  m.logits(p.h, p.logits);
  return p;
}

bool same_row(const std::vector<float>& all, std::size_t row, const std::vector<float>& one, std::size_t width) {
  return std::memcmp(all.data() + row * width, one.data(), width * 4) == 0;
}

}  // namespace

TEST_CASE("model layers: a row's q, k, v, hidden state and logits are bitwise the same alone and in any batch") {
  for (ringattn::DType d : {ringattn::DType::f32, ringattn::DType::bf16}) {
    CAPTURE(ringattn::to_string(d));
    const Model m = Model::from_seed(small(), 7, d);
    const ModelConfig& c = m.config();
    std::vector<std::int32_t> tokens;
    std::vector<std::int64_t> positions;
    for (int i = 0; i < 41; ++i) {
      tokens.push_back(static_cast<std::int32_t>((i * 37 + 5) % c.vocab));
      positions.push_back(3 * i + 1);
    }
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      Model t = Model::from_seed(small(), 7, d);
      t.set_threads(threads);
      const Pass all = run(t, tokens, positions);
      for (std::size_t r : {std::size_t{0}, std::size_t{17}, std::size_t{40}}) {
        CAPTURE(r);
        const Pass one = run(m, std::span(tokens).subspan(r, 1), std::span(positions).subspan(r, 1));
        CHECK(same_row(all.q, r, one.q, one.q.size()));
        CHECK(same_row(all.k, r, one.k, one.k.size()));
        CHECK(same_row(all.v, r, one.v, one.v.size()));
        CHECK(same_row(all.h, r, one.h, one.h.size()));
        CHECK(same_row(all.logits, r, one.logits, one.logits.size()));
      }
    }
  }
}

TEST_CASE("model layers: bf16 matrices are the fp32 model within bf16's rounding, and a model of their own") {
  const Model f = Model::from_seed(small(), 3), b = Model::from_seed(small(), 3, ringattn::DType::bf16);
  CHECK(f.digest() != b.digest());  // ranks holding the two disagree (agree_on_job)
  const std::vector<std::int32_t> tokens = {1, 50, 299};
  const std::vector<std::int64_t> positions = {0, 1, 2};
  const Pass pf = run(f, tokens, positions), pb = run(b, tokens, positions);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < pf.logits.size(); ++i) {
    worst = std::max(worst, std::fabs(double(pf.logits[i]) - pb.logits[i]));
    scale = std::max(scale, std::fabs(double(pf.logits[i])));
  }
  CHECK(worst > 0);                     // rounded: not the fp32 model
  CHECK(worst <= 2e-2 * scale + 1e-3);  // 8 significant bits a weight, over 3 matmuls
}

TEST_CASE("model layers: q, k, v and the logits against a float64 evaluation of the same seeded weights") {
  const ModelConfig c = small();
  const Model m = Model::from_seed(c, 11);
  const std::vector<infer::TensorSpec> specs = infer::tensor_specs(c);
  auto tensor = [&](int index) { return infer::generate_tensor(11, index, specs[std::size_t(index)]); };
  const std::vector<float> embedding = tensor(0), norm = tensor(1), wq = tensor(2), wk = tensor(3), wv = tensor(4);
  const std::int32_t token = 123;
  const std::int64_t position = 0;  // RoPE turns nothing at 0: q, k are the plain projections
  const Pass p = run(m, std::span(&token, 1), std::span(&position, 1));
  std::vector<double> x(std::size_t(c.dim));
  double ss = 0;
  for (std::int64_t i = 0; i < c.dim; ++i)
    ss += double(embedding[std::size_t(token * c.dim + i)]) * embedding[std::size_t(token * c.dim + i)];
  const double inv = 1.0 / std::sqrt(ss / double(c.dim) + double(c.norm_eps));
  for (std::int64_t i = 0; i < c.dim; ++i)
    x[std::size_t(i)] = embedding[std::size_t(token * c.dim + i)] * inv * norm[std::size_t(i)];
  auto check = [&](const std::vector<float>& w, const std::vector<float>& got) {
    int bad = 0;
    for (std::size_t o = 0; o < got.size(); ++o) {
      double want = 0, mag = 0;
      for (std::int64_t i = 0; i < c.dim; ++i) {
        want += double(w[o * std::size_t(c.dim) + std::size_t(i)]) * x[std::size_t(i)];
        mag += std::fabs(double(w[o * std::size_t(c.dim) + std::size_t(i)]) * x[std::size_t(i)]);
      }
      bad += !(std::fabs(got[o] - want) <= 1e-5 * mag + 1e-6);
    }
    return bad;
  };
  CHECK(check(wq, p.q) == 0);
  CHECK(check(wk, p.k) == 0);
  CHECK(check(wv, p.v) == 0);
}
