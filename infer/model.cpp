// infer — the model's weights (seeded or loaded) and its per-token layers.
#include "model.hpp"

#include "digest.hpp"

#include <omp.h>

#include <ringattn/block_attention.hpp>
#include <ringattn/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "input_file.hpp"
#include "safetensors.hpp"

namespace infer {

namespace {

// `v` holding at least n floats (grown, never shrunk; not zeroed: every use writes first).
std::span<float> rows_of(std::vector<float>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return {v.data(), n};
}

std::uint64_t finalise(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::int64_t elements(const TensorSpec& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s.shape) n *= d;
  return n;
}

// OpenMP threads for a pass over `rows` rows (each row's math is the same on any thread):
// one for a single row (decode), else the model's threads.
int team(int threads, std::size_t rows) {
  return rows < 2 ? 1 : threads > 0 ? threads : omp_get_max_threads();
}

void rms_norm(std::span<const float> x, const std::vector<float>& gain, float eps, std::span<float> y, int threads) {
  const std::size_t dim = gain.size(), rows = x.size() / dim;
#pragma omp parallel for num_threads(team(threads, rows)) schedule(static)
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = &x[r * dim];
    double ss = 0;
    for (std::size_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (std::size_t i = 0; i < dim; ++i) y[r * dim + i] = xr[i] * inv * gain[i];
  }
}

// RoPE: pair i of each head (its elements (i, i + D/2) rotate-half, (2i, 2i + 1)
// interleaved) turns by pos * theta^(-2i/D).
void rope(std::span<float> x, std::int64_t heads, std::int64_t head_dim, std::span<const std::int64_t> pos,
          double theta, RopeStyle style, int threads) {
  const std::int64_t half = head_dim / 2;  // <= 128 (ModelConfig::check)
  const std::int64_t step = style == RopeStyle::interleaved ? 2 : 1, partner = style == RopeStyle::interleaved ? 1 : half;
#pragma omp parallel for num_threads(team(threads, pos.size())) schedule(static)
  for (std::size_t r = 0; r < pos.size(); ++r) {
    float c[128], s[128];
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos[r]) * std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
      c[i] = static_cast<float>(std::cos(angle));
      s[i] = static_cast<float>(std::sin(angle));
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      float* v = &x[(r * static_cast<std::size_t>(heads) + static_cast<std::size_t>(h)) * static_cast<std::size_t>(head_dim)];
      for (std::int64_t i = 0; i < half; ++i) {
        float& a = v[i * step];
        float& b = v[i * step + partner];
        const float a0 = a, b0 = b;
        a = a0 * c[i] - b0 * s[i];
        b = b0 * c[i] + a0 * s[i];
      }
    }
  }
}

}  // namespace

void ModelConfig::check() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw ringattn::InvalidArgument("model: " + what);
  };
  need(vocab >= 2 && vocab <= (1 << 24), "--vocab must be in [2, 2^24]");
  need(dim >= 2 && dim <= 65536, "--dim must be in [2, 65536]");
  need(layers >= 1 && layers <= 1024, "--layers must be in [1, 1024]");
  need(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0, "--kv-heads must divide --heads");
  need(head_dim >= 2 && head_dim % 2 == 0 && head_dim <= 256, "--head-dim must be even, in [2, 256] (RoPE pairs)");
  need(ffn >= 1 && ffn <= (1 << 20), "--ffn must be in [1, 2^20]");
}

std::vector<TensorSpec> tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab, c.dim}});
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {c.dim}});
    t.push_back({p + "self_attn.q_proj.weight", {c.heads * c.head_dim, c.dim}});
    t.push_back({p + "self_attn.k_proj.weight", {c.kv_heads * c.head_dim, c.dim}});
    t.push_back({p + "self_attn.v_proj.weight", {c.kv_heads * c.head_dim, c.dim}});
    t.push_back({p + "self_attn.o_proj.weight", {c.dim, c.heads * c.head_dim}});
    t.push_back({p + "post_attention_layernorm.weight", {c.dim}});
    t.push_back({p + "mlp.gate_proj.weight", {c.ffn, c.dim}});
    t.push_back({p + "mlp.up_proj.weight", {c.ffn, c.dim}});
    t.push_back({p + "mlp.down_proj.weight", {c.dim, c.ffn}});
  }
  t.push_back({"model.norm.weight", {c.dim}});
  if (!c.tied) t.push_back({"lm_head.weight", {c.vocab, c.dim}});
  return t;
}

std::vector<float> generate_tensor(std::uint64_t seed, int index, const TensorSpec& spec) {
  const std::uint64_t key = finalise(seed + static_cast<std::uint64_t>(index + 1) * 0xD1B54A32D192ED03ull);
  const bool norm = spec.shape.size() == 1;
  const float scale = norm ? 0.1f : static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.shape[1])));
  std::vector<float> w(static_cast<std::size_t>(elements(spec)));
  const std::int64_t n = static_cast<std::int64_t>(w.size());
#pragma omp parallel for schedule(static) if (n > (1 << 20))  // each element alone: any split draws the same
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t z = finalise(key + static_cast<std::uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull);
    const float u = static_cast<float>(z >> 40) * 0x1p-24f;
    const float a = 2.0f * u - 1.0f;
    w[i] = norm ? 1.0f + scale * a : a * scale;
  }
  return w;
}

namespace {

// Puts tensors (in tensor_specs order, HF layout) into the model's layout.
template <typename Source>
void assemble(const ModelConfig& c, ringattn::DType dtype, Source&& next, ringattn::Linear& embedding,
              std::vector<LayerWeights>& layers, std::vector<float>& final_norm, ringattn::Linear& head) {
  // Each matrix is packed (bf16: rounded) as it comes, straight from its tensors' floats,
  // which go at once: loading holds the packed model and one layer's tensors at most.
  using ringattn::Linear;
  embedding = Linear(dtype, c.dim, {next()});
  const std::int64_t qd = c.heads * c.head_dim;
  layers.resize(static_cast<std::size_t>(c.layers));
  for (LayerWeights& L : layers) {
    L.attn_norm = next();
    {
      const std::vector<float> wq = next(), wk = next(), wv = next();
      L.qkv = Linear(dtype, c.dim, {wq, wk, wv});
    }
    L.wo = Linear(dtype, qd, {next()});
    L.mlp_norm = next();
    {
      const std::vector<float> gate = next(), up = next();
      L.gate_up = Linear(dtype, c.dim, {gate, up});
    }
    L.down = Linear(dtype, c.ffn, {next()});
  }
  final_norm = next();
  head = c.tied ? embedding : Linear(dtype, c.dim, {next()});  // tied: the same weights, held once
}

}  // namespace

Model Model::from_seed(const ModelConfig& c, std::uint64_t seed, ringattn::DType matrices) {
  c.check();
  Model m;
  m.c_ = c;
  const std::vector<TensorSpec> specs = tensor_specs(c);
  int t = 0;
  auto next = [&] {
    const int index = t++;
    return generate_tensor(seed, index, specs[static_cast<std::size_t>(index)]);
  };
  assemble(c, matrices, next, m.embedding_, m.layers_, m.final_norm_, m.head_);
  return m;
}

Model Model::from_safetensors(const ModelConfig& c, const std::string& path, ringattn::DType matrices) {
  c.check();
  SafetensorsFile file(path);
  Model m;
  m.c_ = c;
  const std::vector<TensorSpec> specs = tensor_specs(c);
  std::size_t t = 0;
  auto next = [&] {
    const TensorSpec& s = specs[t++];
    std::vector<float> w = file.take(s.name, s.shape);
    for (float x : w)
      if (!std::isfinite(x)) throw ringattn::FileError("weights " + path + ": tensor \"" + s.name + "\" holds NaN or inf");
    return w;
  };
  assemble(c, matrices, next, m.embedding_, m.layers_, m.final_norm_, m.head_);
  if (const auto extra = file.unused(); !extra.empty())
    throw ringattn::FileError("weights " + path + ": tensor \"" + extra.front() +
                              "\" is not part of this configuration (another --layers, or --untied?)");
  return m;
}

Model Model::from_llama2c(const std::string& path, ringattn::DType matrices) {
  auto fail = [&](const std::string& what) { return ringattn::FileError("model " + path + ": " + what); };
  constexpr std::uint64_t kMaxBytes = std::uint64_t{64} << 30;
  const std::vector<char> bytes = read_input_file(path, kMaxBytes, "model");
  if (bytes.size() < 28) throw fail(std::to_string(bytes.size()) + " bytes: shorter than llama2.c's 28-byte header");
  std::int32_t h[7];
  std::memcpy(h, bytes.data(), sizeof h);
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  const std::int64_t most[7] = {65536, 1 << 20, 1024, 1024, 1024, 1 << 24, 1 << 24};
  for (int i = 0; i < 7; ++i) {
    const std::int64_t v = i == 5 ? std::abs(static_cast<std::int64_t>(h[i])) : h[i];
    if (v < 1 || v > most[i])
      throw fail("header field " + std::string(names[i]) + " = " + std::to_string(h[i]) + " is outside 1.." +
                 std::to_string(most[i]) + (i == 5 ? " (negative: a separate classifier)" : "") +
                 " (not a llama2.c version-0 checkpoint?)");
  }
  ModelConfig c;
  c.dim = h[0];
  c.ffn = h[1];
  c.layers = h[2];
  c.heads = h[3];
  c.kv_heads = h[4];
  c.vocab = std::abs(static_cast<std::int64_t>(h[5]));
  c.tied = h[5] > 0;
  c.context = h[6];
  c.rope_style = RopeStyle::interleaved;
  c.rope_theta = 10000;
  c.norm_eps = 1e-5f;
  if (c.dim % c.heads != 0) throw fail("dim " + std::to_string(c.dim) + " is not a multiple of n_heads " + std::to_string(c.heads));
  if (c.heads % c.kv_heads != 0)
    throw fail("n_kv_heads " + std::to_string(c.kv_heads) + " does not divide n_heads " + std::to_string(c.heads));
  c.head_dim = c.dim / c.heads;
  try {
    c.check();
  } catch (const ringattn::InvalidArgument& e) {
    throw fail(e.what());
  }
  // The file is exactly the header and these float32 tensors (each for all layers in turn).
  const std::int64_t L = c.layers, D = c.dim, F = c.ffn, kv = c.kv_heads * c.head_dim;
  const std::int64_t rope_tables = c.context * c.head_dim;  // two of seq_len x head_size/2, unused
  const std::int64_t floats = c.vocab * D + L * D + L * D * D + 2 * L * kv * D + L * D * D + L * D + 3 * L * F * D + D +
                              rope_tables + (c.tied ? 0 : c.vocab * D);
  const std::uint64_t want = 28 + 4 * static_cast<std::uint64_t>(floats);
  if (bytes.size() != want)
    throw fail(std::to_string(bytes.size()) + " bytes, but a checkpoint of this header (dim " + std::to_string(D) +
               ", " + std::to_string(L) + " layers, vocab " + std::to_string(c.vocab) + (c.tied ? ", shared" : ", separate") +
               " classifier) is " + std::to_string(want));
  std::size_t at = 0;  // in floats after the header
  auto group = [&](std::int64_t per_layer, std::int64_t layers) {  // a tensor for every layer: where it starts
    const std::size_t start = at;
    at += static_cast<std::size_t>(per_layer * layers);
    return std::pair<std::size_t, std::int64_t>{start, per_layer};
  };
  const auto embedding = group(c.vocab * D, 1), attn_norm = group(D, L), wq = group(D * D, L), wk = group(kv * D, L),
             wv = group(kv * D, L), wo = group(D * D, L), mlp_norm = group(D, L), w1 = group(F * D, L),
             w2 = group(D * F, L), w3 = group(F * D, L), final_norm = group(D, 1);
  at += static_cast<std::size_t>(rope_tables);
  const auto classifier = group(c.tied ? 0 : c.vocab * D, 1);
  // Tensor `name` of `layer` (-1: not a per-layer tensor), copied out of the file's bytes.
  auto tensor = [&](std::pair<std::size_t, std::int64_t> g, std::int64_t layer, const char* name) {
    std::vector<float> w(static_cast<std::size_t>(g.second));
    const std::size_t first = g.first + static_cast<std::size_t>(std::max<std::int64_t>(layer, 0) * g.second);
    std::memcpy(w.data(), bytes.data() + 28 + 4 * first, w.size() * sizeof(float));
    for (float x : w)
      if (!std::isfinite(x))
        throw fail(std::string(name) + (layer >= 0 ? " of layer " + std::to_string(layer) : "") + " holds NaN or inf");
    return w;
  };
  // In tensor_specs' order (layer by layer, Hugging Face's names): llama2.c's w1 is the
  // gate, w3 the up and w2 the down projection.
  std::vector<std::vector<float>> order;
  order.push_back(tensor(embedding, -1, "token_embedding_table"));
  for (std::int64_t l = 0; l < L; ++l) {
    order.push_back(tensor(attn_norm, l, "rms_att_weight"));
    order.push_back(tensor(wq, l, "wq"));
    order.push_back(tensor(wk, l, "wk"));
    order.push_back(tensor(wv, l, "wv"));
    order.push_back(tensor(wo, l, "wo"));
    order.push_back(tensor(mlp_norm, l, "rms_ffn_weight"));
    order.push_back(tensor(w1, l, "w1"));
    order.push_back(tensor(w3, l, "w3"));
    order.push_back(tensor(w2, l, "w2"));
  }
  order.push_back(tensor(final_norm, -1, "rms_final_weight"));
  if (!c.tied) order.push_back(tensor(classifier, -1, "wcls"));
  Model m;
  m.c_ = c;
  std::size_t t = 0;
  assemble(c, matrices, [&] { return std::move(order[t++]); }, m.embedding_, m.layers_, m.final_norm_, m.head_);
  return m;
}

void Model::embed(std::span<const std::int32_t> tokens, std::span<float> x) const {
  const std::size_t dim = static_cast<std::size_t>(c_.dim);
  for (std::int32_t t : tokens)  // before the threads: nothing may throw inside them
    if (t < 0 || t >= c_.vocab)
      throw ringattn::InvalidArgument("token id " + std::to_string(t) + " is outside the model's vocabulary [0, " +
                                      std::to_string(c_.vocab) + ")");
  if (x.size() != tokens.size() * dim)
    throw ringattn::InvalidArgument("embed: " + std::to_string(x.size()) + " floats for " +
                                    std::to_string(tokens.size()) + " tokens of dim " + std::to_string(dim));
#pragma omp parallel for num_threads(team(threads_, tokens.size())) schedule(static)
  for (std::size_t r = 0; r < tokens.size(); ++r) embedding_.row(tokens[r], x.subspan(r * dim, dim));
}

std::size_t Model::weight_bytes() const {
  std::size_t n = (final_norm_.size() + 2 * layers_.size() * static_cast<std::size_t>(c_.dim)) * sizeof(float);
  n += embedding_.packed().size() + (c_.tied ? 0 : head_.packed().size());
  for (const LayerWeights& l : layers_)
    for (const auto* w : {&l.qkv, &l.wo, &l.gate_up, &l.down}) n += w->packed().size();
  return n;
}

// The per-row passes below run over chunks of at most kChunkRows rows: a prefill's
// scratch rows stay a few tens of MB (a Llama-3.2-1B-shaped MLP over 2048 rows would hold
// 200 MB), and the matmuls lose nothing (Linear reads the weights once per 384 rows anyway).
// Each row's result is the same in any chunk (batch invariance).
constexpr std::size_t kChunkRows = 384;

void Model::attention_inputs(int l, std::span<const float> h, std::span<const std::int64_t> rope_positions,
                             std::span<float> q, std::span<float> k, std::span<float> v) const {
  const std::size_t rows = h.size() / static_cast<std::size_t>(c_.dim);
  const std::size_t dim = static_cast<std::size_t>(c_.dim), qd = static_cast<std::size_t>(c_.heads * c_.head_dim),
                    kd = static_cast<std::size_t>(c_.kv_heads * c_.head_dim);
  for (std::size_t r = 0; r < rows; r += kChunkRows) {
    const std::size_t n = std::min(kChunkRows, rows - r);
    attention_inputs_rows(l, h.subspan(r * dim, n * dim), rope_positions.subspan(r, n), q.subspan(r * qd, n * qd),
                          k.subspan(r * kd, n * kd), v.subspan(r * kd, n * kd));
  }
}

void Model::attention_output_and_mlp(int l, std::span<const float> o, std::span<float> h) const {
  const std::size_t rows = h.size() / static_cast<std::size_t>(c_.dim);
  const std::size_t dim = static_cast<std::size_t>(c_.dim), qd = static_cast<std::size_t>(c_.heads * c_.head_dim);
  for (std::size_t r = 0; r < rows; r += kChunkRows) {
    const std::size_t n = std::min(kChunkRows, rows - r);
    attention_output_and_mlp_rows(l, o.subspan(r * qd, n * qd), h.subspan(r * dim, n * dim));
  }
}

void Model::attention_inputs_rows(int l, std::span<const float> h, std::span<const std::int64_t> rope_positions,
                                  std::span<float> q, std::span<float> k, std::span<float> v) const {
  const LayerWeights& L = layers_[static_cast<std::size_t>(l)];
  const std::int64_t rows = static_cast<std::int64_t>(h.size()) / c_.dim;
  const std::int64_t qd = c_.heads * c_.head_dim, kd = c_.kv_heads * c_.head_dim, width = qd + 2 * kd;
  const std::span<float> n = rows_of(scratch_.norm, h.size());
  const std::span<float> t = rows_of(scratch_.qkv, static_cast<std::size_t>(rows * width));
  rms_norm(h, L.attn_norm, c_.norm_eps, n, threads_);
  L.qkv.apply(n.data(), rows, c_.dim, t.data(), width, false, threads_);
#pragma omp parallel for num_threads(team(threads_, static_cast<std::size_t>(rows))) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* tr = &t[static_cast<std::size_t>(r * width)];
    std::memcpy(&q[static_cast<std::size_t>(r * qd)], tr, static_cast<std::size_t>(qd) * sizeof(float));
    std::memcpy(&k[static_cast<std::size_t>(r * kd)], tr + qd, static_cast<std::size_t>(kd) * sizeof(float));
    std::memcpy(&v[static_cast<std::size_t>(r * kd)], tr + qd + kd, static_cast<std::size_t>(kd) * sizeof(float));
  }
  rope(q, c_.heads, c_.head_dim, rope_positions, c_.rope_theta, c_.rope_style, threads_);
  rope(k, c_.kv_heads, c_.head_dim, rope_positions, c_.rope_theta, c_.rope_style, threads_);
}

void Model::attention_output_and_mlp_rows(int l, std::span<const float> o, std::span<float> h) const {
  const LayerWeights& L = layers_[static_cast<std::size_t>(l)];
  const std::size_t rows = h.size() / static_cast<std::size_t>(c_.dim), ffn = static_cast<std::size_t>(c_.ffn);
  L.wo.apply(o, h, /*add=*/true, threads_);
  const std::span<float> n = rows_of(scratch_.norm, h.size());
  const std::span<float> gu = rows_of(scratch_.gate_up, rows * 2 * ffn), act = rows_of(scratch_.act, rows * ffn);
  rms_norm(h, L.mlp_norm, c_.norm_eps, n, threads_);
  L.gate_up.apply(n, gu, false, threads_);
#pragma omp parallel for num_threads(team(threads_, rows)) schedule(static)
  for (std::size_t r = 0; r < rows; ++r) {
    const float* g = &gu[r * 2 * ffn];
    const float* u = g + ffn;
    for (std::size_t i = 0; i < ffn; ++i) act[r * ffn + i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
  L.down.apply(act, h, /*add=*/true, threads_);
}

void Model::logits(std::span<const float> h, std::span<float> out) const {
  const std::span<float> n = rows_of(scratch_.norm, h.size());
  rms_norm(h, final_norm_, c_.norm_eps, n, threads_);
  head_.apply(n, out, false, threads_);
}

std::uint64_t Model::digest() const {
  Fnv1a f;
  for (std::int64_t v : {c_.vocab, c_.dim, c_.layers, c_.heads, c_.kv_heads, c_.head_dim, c_.ffn, c_.context}) f.value(v);
  f.value(static_cast<int>(c_.tied));
  f.value(c_.rope_theta);
  f.value(static_cast<int>(c_.rope_style));
  f.value(c_.norm_eps);
  auto matrix = [&](const ringattn::Linear& w) {  // its shape, dtype and packed bytes (the same on every CPU)
    f.value(w.out());
    f.value(w.in());
    f.value(static_cast<int>(w.dtype()));
    f.bytes(w.packed().data(), w.packed().size());
  };
  matrix(embedding_);
  for (const auto& l : layers_) {
    f.floats(l.attn_norm);
    f.floats(l.mlp_norm);
    for (const auto* w : {&l.qkv, &l.wo, &l.gate_up, &l.down}) matrix(*w);
  }
  f.floats(final_norm_);
  if (!c_.tied) matrix(head_);  // tied: the embedding's bytes, read above
  return f.h;
}

}  // namespace infer
