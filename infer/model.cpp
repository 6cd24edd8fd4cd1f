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
#include <functional>
#include <initializer_list>
#include <map>
#include <utility>

#include "gguf.hpp"
#include "gguf_config.hpp"
#include "hf_config.hpp"
#include "hf_weights.hpp"
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
// interleaved) turns by pos * inv_freq[i].
void rope(std::span<float> x, std::int64_t heads, std::int64_t head_dim, std::span<const std::int64_t> pos,
          const std::vector<double>& inv_freq, RopeStyle style, int threads) {
  const std::int64_t half = head_dim / 2;  // <= 128 (ModelConfig::check)
  const std::int64_t step = style == RopeStyle::interleaved ? 2 : 1, partner = style == RopeStyle::interleaved ? 1 : half;
#pragma omp parallel for num_threads(team(threads, pos.size())) schedule(static)
  for (std::size_t r = 0; r < pos.size(); ++r) {
    float c[128], s[128];
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos[r]) * inv_freq[static_cast<std::size_t>(i)];
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

// theta^(-2i/D) for each pair i, then Llama 3's scaling where the config has it (Hugging
// Face's _compute_llama3_parameters): wavelengths shorter than original_context /
// high_freq_factor kept, longer than original_context / low_freq_factor divided by factor,
// a linear blend of the two between.
std::vector<double> rope_frequencies(const ModelConfig& c) {
  std::vector<double> f(static_cast<std::size_t>(c.head_dim / 2));
  const RopeScaling& r = c.rope_scaling;
  for (std::size_t i = 0; i < f.size(); ++i) {
    double x = std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
    if (r.factor > 0) {
      const double wavelen = 2 * M_PI / x;
      const double low = r.original_context / r.low_freq_factor, high = r.original_context / r.high_freq_factor;
      if (wavelen > low) {
        x /= r.factor;
      } else if (wavelen >= high) {
        const double smooth = (r.original_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        x = (1 - smooth) * x / r.factor + smooth * x;
      }
    }
    if (!c.rope_factors.empty()) x /= c.rope_factors[i];
    f[i] = x;
  }
  return f;
}

// RMSNorm of each head_dim-long piece of x in place (qwen3's q/k norm), gains [head_dim].
void head_norm(std::span<float> x, const std::vector<float>& gain, float eps, int threads) {
  const std::size_t d = gain.size(), pieces = x.size() / d;
#pragma omp parallel for num_threads(team(threads, pieces)) schedule(static)
  for (std::size_t p = 0; p < pieces; ++p) {
    float* v = &x[p * d];
    double ss = 0;
    for (std::size_t i = 0; i < d; ++i) ss += static_cast<double>(v[i]) * v[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (std::size_t i = 0; i < d; ++i) v[i] = v[i] * inv * gain[i];
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
    if (c.qkv_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {c.heads * c.head_dim}});
      t.push_back({p + "self_attn.k_proj.bias", {c.kv_heads * c.head_dim}});
      t.push_back({p + "self_attn.v_proj.bias", {c.kv_heads * c.head_dim}});
    }
    if (c.qk_norm) {
      t.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      t.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
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

// A model's tensors as assemble() asks for them, by name (tensor_specs). The default
// matrix() packs the tensors' floats; a mapped file's source packs its own bytes.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual std::vector<float> floats(const TensorSpec& t) = 0;
  virtual ringattn::Linear matrix(ringattn::DType dtype, std::int64_t in, const std::vector<const TensorSpec*>& parts) {
    std::vector<std::vector<float>> values;
    std::vector<ringattn::Linear::Block> blocks;
    for (const TensorSpec* t : parts) values.push_back(floats(*t));
    for (std::size_t i = 0; i < parts.size(); ++i)
      blocks.push_back({ringattn::DType::f32, values[i].data(), parts[i]->shape[0]});
    return ringattn::Linear(dtype, in, std::span<const ringattn::Linear::Block>(blocks));
  }
};

// Tensors from a function of their index in tensor_specs (a seed, a checkpoint read whole).
class IndexedSource : public TensorSource {
 public:
  IndexedSource(const ModelConfig& c, std::function<std::vector<float>(std::size_t, const TensorSpec&)> get)
      : get_(std::move(get)) {
    const std::vector<TensorSpec> specs = tensor_specs(c);
    for (std::size_t i = 0; i < specs.size(); ++i) index_[specs[i].name] = i;
  }
  std::vector<float> floats(const TensorSpec& t) override { return get_(index_.at(t.name), t); }

 private:
  std::function<std::vector<float>(std::size_t, const TensorSpec&)> get_;
  std::map<std::string, std::size_t> index_;
};

// Puts the tensors into the model's layout. Each matrix is packed as it comes (converted to
// `dtype` on the way), and its source data goes at once: loading holds the packed model and
// one layer's tensors at most.
void assemble(const ModelConfig& c, ringattn::DType dtype, TensorSource& src, ringattn::Linear& embedding,
              std::vector<LayerWeights>& layers, std::vector<float>& final_norm, ringattn::Linear& head) {
  std::map<std::string, TensorSpec> spec;
  for (TensorSpec& t : tensor_specs(c)) spec[t.name] = std::move(t);
  auto matrix = [&](std::int64_t in, std::initializer_list<std::string> names) {
    std::vector<const TensorSpec*> parts;
    for (const std::string& n : names) parts.push_back(&spec.at(n));
    return src.matrix(dtype, in, parts);
  };
  auto floats = [&](const std::string& n) { return src.floats(spec.at(n)); };
  embedding = matrix(c.dim, {"model.embed_tokens.weight"});
  const std::int64_t qd = c.heads * c.head_dim;
  layers.resize(static_cast<std::size_t>(c.layers));
  for (std::size_t l = 0; l < layers.size(); ++l) {
    LayerWeights& L = layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    L.attn_norm = floats(p + "input_layernorm.weight");
    L.qkv = matrix(c.dim, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"});
    if (c.qkv_bias)
      for (const char* n : {"q_proj.bias", "k_proj.bias", "v_proj.bias"}) {
        const std::vector<float> b = floats(p + "self_attn." + n);
        L.qkv_bias.insert(L.qkv_bias.end(), b.begin(), b.end());
      }
    if (c.qk_norm) {
      L.q_norm = floats(p + "self_attn.q_norm.weight");
      L.k_norm = floats(p + "self_attn.k_norm.weight");
    }
    L.wo = matrix(qd, {p + "self_attn.o_proj.weight"});
    L.mlp_norm = floats(p + "post_attention_layernorm.weight");
    L.gate_up = matrix(c.dim, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
    L.down = matrix(c.ffn, {p + "mlp.down_proj.weight"});
  }
  final_norm = floats("model.norm.weight");
  head = c.tied ? embedding : matrix(c.dim, {"lm_head.weight"});  // tied: the same weights, held once
}

// A mapped checkpoint's tensors (a Hugging Face directory, a GGUF file), packed straight
// from the mapping; `rename` maps tensor_specs' names to the file's. Each matrix is held in
// `held`, else in the dtype the file stores it in (a GGUF file mixes them).
template <class Weights>
class MappedSource : public TensorSource {
 public:
  MappedSource(Weights& w, std::function<std::string(const std::string&)> rename, std::optional<ringattn::DType> held)
      : w_(w), rename_(std::move(rename)), held_(held) {}
  std::vector<float> floats(const TensorSpec& t) override { return w_.take(rename_(t.name), t.shape); }
  ringattn::Linear matrix(ringattn::DType dtype, std::int64_t in, const std::vector<const TensorSpec*>& parts) override {
    std::vector<ringattn::Linear::Block> blocks;
    for (const TensorSpec* t : parts) {
      const std::string name = rename_(t->name);
      const TensorView v = w_.view(name, t->shape);
      check_finite(v, "weights " + w_.file_of(name), name);
      blocks.push_back({v.dtype, v.data, t->shape[0]});
    }
    ringattn::Linear out(held_.value_or(blocks.front().dtype), in, std::span<const ringattn::Linear::Block>(blocks));
    (void)dtype;  // assemble()'s: the held dtype is this source's choice
    for (const TensorSpec* t : parts) w_.release(rename_(t->name));
    return out;
  }

 private:
  Weights& w_;
  std::function<std::string(const std::string&)> rename_;
  std::optional<ringattn::DType> held_;
};

// llama.cpp's name of a Hugging Face tensor name (its converter's table, for the tensors a
// llama, qwen2 or qwen3 model has).
std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::map<std::string, std::string> layer = {
      {"input_layernorm.weight", "attn_norm.weight"},     {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},       {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},           {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},           {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},  {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"}, {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},            {"mlp.down_proj.weight", "ffn_down.weight"}};
  const std::size_t dot = hf.find('.', 13);  // "model.layers." is 13 characters
  return "blk." + hf.substr(13, dot - 13) + "." + layer.at(hf.substr(dot + 1));
}

}  // namespace

Model Model::from_seed(const ModelConfig& c, std::uint64_t seed, ringattn::DType matrices) {
  c.check();
  Model m;
  m.c_ = c;
  m.inv_freq_ = rope_frequencies(c);
  IndexedSource src(c, [&](std::size_t index, const TensorSpec& t) {
    return generate_tensor(seed, static_cast<int>(index), t);
  });
  assemble(c, matrices, src, m.embedding_, m.layers_, m.final_norm_, m.head_);
  return m;
}

Model Model::from_safetensors(const ModelConfig& c, const std::string& path, ringattn::DType matrices) {
  c.check();
  SafetensorsFile file(path);
  Model m;
  m.c_ = c;
  m.inv_freq_ = rope_frequencies(c);
  IndexedSource src(c, [&](std::size_t, const TensorSpec& t) { return file.take(t.name, t.shape); });
  assemble(c, matrices, src, m.embedding_, m.layers_, m.final_norm_, m.head_);
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
  m.inv_freq_ = rope_frequencies(c);
  IndexedSource src(c, [&](std::size_t index, const TensorSpec&) { return std::move(order[index]); });
  assemble(c, matrices, src, m.embedding_, m.layers_, m.final_norm_, m.head_);
  return m;
}

Model Model::from_gguf(const std::string& path, std::optional<ringattn::DType> matrices) {
  GgufFile file(path);
  const ModelConfig c = gguf_config(file);
  Model m;
  m.c_ = c;
  m.inv_freq_ = rope_frequencies(c);
  MappedSource<GgufFile> src(file, gguf_name, matrices);
  assemble(c, ringattn::DType::f32, src, m.embedding_, m.layers_, m.final_norm_, m.head_);
  for (const std::string& extra : file.unused())
    if (extra != "rope_freqs.weight")  // read by gguf_config
      throw ringattn::FileError("model " + path + ": tensor \"" + extra + "\" is not part of the model its metadata describes");
  return m;
}

Model Model::from_hf(const std::string& dir, std::optional<ringattn::DType> matrices) {
  const ModelConfig c = read_hf_config(dir);
  HfWeights weights(dir);
  Model m;
  m.c_ = c;
  m.inv_freq_ = rope_frequencies(c);
  MappedSource<HfWeights> src(weights, [](const std::string& n) { return n; }, matrices);
  assemble(c, ringattn::DType::f32, src, m.embedding_, m.layers_, m.final_norm_, m.head_);
  for (const std::string& extra : weights.unused()) {
    // Tolerated: a tied checkpoint that also stores the head, and RoPE tables old exports saved.
    if (c.tied && extra.ends_with("\"lm_head.weight\"")) continue;
    if (extra.ends_with(".rotary_emb.inv_freq\"")) continue;
    throw ringattn::FileError("model " + dir + ": " + extra + " is not part of the model config.json describes");
  }
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
  for (const LayerWeights& l : layers_) {
    for (const auto* w : {&l.qkv, &l.wo, &l.gate_up, &l.down}) n += w->packed().size();
    n += (l.qkv_bias.size() + l.q_norm.size() + l.k_norm.size()) * sizeof(float);
  }
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
    float* tr = &t[static_cast<std::size_t>(r * width)];
    if (!L.qkv_bias.empty())
      for (std::int64_t i = 0; i < width; ++i) tr[i] += L.qkv_bias[static_cast<std::size_t>(i)];
    std::memcpy(&q[static_cast<std::size_t>(r * qd)], tr, static_cast<std::size_t>(qd) * sizeof(float));
    std::memcpy(&k[static_cast<std::size_t>(r * kd)], tr + qd, static_cast<std::size_t>(kd) * sizeof(float));
    std::memcpy(&v[static_cast<std::size_t>(r * kd)], tr + qd + kd, static_cast<std::size_t>(kd) * sizeof(float));
  }
  if (c_.qk_norm) {
    head_norm(q, L.q_norm, c_.norm_eps, threads_);
    head_norm(k, L.k_norm, c_.norm_eps, threads_);
  }
  rope(q, c_.heads, c_.head_dim, rope_positions, inv_freq_, c_.rope_style, threads_);
  rope(k, c_.kv_heads, c_.head_dim, rope_positions, inv_freq_, c_.rope_style, threads_);
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
  f.bytes(c_.architecture.data(), c_.architecture.size());
  f.floats(c_.rope_factors);
  f.value(static_cast<int>(c_.qkv_bias) | static_cast<int>(c_.qk_norm) << 1);
  for (double x : {c_.rope_scaling.factor, c_.rope_scaling.low_freq_factor, c_.rope_scaling.high_freq_factor,
                   c_.rope_scaling.original_context})
    f.value(x);
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
    f.floats(l.qkv_bias);
    f.floats(l.q_norm);
    f.floats(l.k_norm);
    for (const auto* w : {&l.qkv, &l.wo, &l.gate_up, &l.down}) matrix(*w);
  }
  f.floats(final_norm_);
  if (!c_.tied) matrix(head_);  // tied: the embedding's bytes, read above
  return f.h;
}

}  // namespace infer
