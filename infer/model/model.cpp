// infer — the model's per-token layers (its loaders: model_load.cpp).
#include "model.hpp"

#include "../common/digest.hpp"
#include "architecture.hpp"

#include <omp.h>

#include <ringattn/block_attention.hpp>
#include <ringattn/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace infer {

namespace {

// `v` holding at least n floats (grown, never shrunk; not zeroed: every use writes first).
std::span<float> rows_of(std::vector<float>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return {v.data(), n};
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
// A "linear" scaling divides every frequency by factor. The sliding-window layers' (local)
// frequencies take neither scaling nor rope_factors.
std::vector<double> rope_frequencies(const ModelConfig& c, bool local) {
  std::vector<double> f(static_cast<std::size_t>(c.head_dim / 2));
  const RopeScaling r = local ? RopeScaling{} : c.rope_scaling;
  const double theta = local && c.rope_theta_local > 0 ? c.rope_theta_local : c.rope_theta;
  for (std::size_t i = 0; i < f.size(); ++i) {
    double x = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
    if (r.factor > 0 && r.linear) {
      x /= r.factor;
    } else if (r.factor > 0) {
      const double wavelen = 2 * M_PI / x;
      const double low = r.original_context / r.low_freq_factor, high = r.original_context / r.high_freq_factor;
      if (wavelen > low) {
        x /= r.factor;
      } else if (wavelen >= high) {
        const double smooth = (r.original_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        x = (1 - smooth) * x / r.factor + smooth * x;
      }
    }
    if (!c.rope_factors.empty() && !local) x /= c.rope_factors[i];
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

// The MLP's activation of the gate rows g times the up rows u, into act [rows, ffn].
void gated(Activation kind, std::span<const float> gu, std::size_t rows, std::size_t ffn, std::span<float> act,
           int threads) {
#pragma omp parallel for num_threads(team(threads, rows)) schedule(static)
  for (std::size_t r = 0; r < rows; ++r) {
    const float* g = &gu[r * 2 * ffn];
    const float* u = g + ffn;
    float* a = &act[r * ffn];
    if (kind == Activation::silu) {
      for (std::size_t i = 0; i < ffn; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    } else {  // gelu_tanh
      constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
      for (std::size_t i = 0; i < ffn; ++i) {
        const float x = g[i];
        a[i] = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x))) * u[i];
      }
    }
  }
}

}  // namespace

void Model::configure(const ModelConfig& c, TpShard shard) {
  c_ = c;
  arch_ = &architecture_named(c.architecture);
  parts_ = TpParts::of(c, shard);
  inv_freq_ = rope_frequencies(c, false);
  inv_freq_local_ = c.sliding.empty() ? std::vector<double>{} : rope_frequencies(c, true);
}

TpGroup* Model::group_for(TpGroup* group, const char* call) const {
  if (parts_.split() && group == nullptr)
    throw ringattn::InvalidArgument(std::string("Model::") + call + ": this rank holds part " +
                                    std::to_string(parts_.shard.rank) + " of " + std::to_string(parts_.shard.size) +
                                    " of the model and needs its tensor-parallel group");
  return parts_.split() ? group : nullptr;
}

void Model::add_projection(const ringattn::Linear& w, std::span<const float> x, std::span<float> h, TpGroup* group,
                           const std::vector<float>& post_norm) const {
  if (!group && post_norm.empty()) {
    w.apply(x, h, /*add=*/true, threads_);
    return;
  }
  const std::span<float> part = rows_of(scratch_.part, h.size());
  w.apply(x, part, /*add=*/false, threads_);
  if (group) group->sum(part);
  if (!post_norm.empty()) rms_norm(part, post_norm, c_.norm_eps, part, threads_);  // (in place: each row read first)
  for (std::size_t i = 0; i < h.size(); ++i) h[i] += part[i];
}

void Model::embed(std::span<const std::int32_t> tokens, std::span<float> x, TpGroup* group) const {
  group = group_for(group, "embed");
  const std::size_t dim = static_cast<std::size_t>(c_.dim);
  for (std::int32_t t : tokens)  // before the threads: nothing may throw inside them
    if (t < 0 || t >= c_.vocab)
      throw ringattn::InvalidArgument("token id " + std::to_string(t) + " is outside the model's vocabulary [0, " +
                                      std::to_string(c_.vocab) + ")");
  if (x.size() != tokens.size() * dim)
    throw ringattn::InvalidArgument("embed: " + std::to_string(x.size()) + " floats for " +
                                    std::to_string(tokens.size()) + " tokens of dim " + std::to_string(dim));
  // A part holds its vocabulary's rows: the others' tokens are zeros here, their rows there.
  const Part v = parts_.vocab;
#pragma omp parallel for num_threads(team(threads_, tokens.size())) schedule(static)
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    if (tokens[r] >= v.first && tokens[r] < v.end()) embedding_.row(tokens[r] - v.first, x.subspan(r * dim, dim));
    else std::fill_n(x.begin() + static_cast<std::ptrdiff_t>(r * dim), dim, 0.0f);
  }
  if (group && !x.empty()) group->sum(x);
  if (arch_->embedding_scale) {  // gemma: times sqrt(dim), rounded to fp32 (as llama.cpp and HF's fp32 model)
    const float s = static_cast<float>(std::sqrt(static_cast<double>(c_.dim)));
    for (float& e : x) e *= s;
  }
}

void Model::set_activations(ringattn::Activations a) {
  embedding_.set_activations(a);
  head_.set_activations(a);
  for (LayerWeights& l : layers_)
    for (auto* w : {&l.qkv, &l.wo, &l.gate_up, &l.down}) w->set_activations(a);
}

bool Model::quantized() const {
  auto blocks = [](const ringattn::Linear& w) {
    return w.mixed() || w.dtype() == ringattn::DType::q8_0 || w.dtype() == ringattn::DType::q4_k ||
           w.dtype() == ringattn::DType::q6_k;
  };
  if (blocks(embedding_) || blocks(head_)) return true;
  for (const LayerWeights& l : layers_)
    for (const auto* w : {&l.qkv, &l.wo, &l.gate_up, &l.down})
      if (blocks(*w)) return true;
  return false;
}

std::size_t Model::weight_bytes() const {
  std::size_t n = (final_norm_.size() + 2 * layers_.size() * static_cast<std::size_t>(c_.dim)) * sizeof(float);
  n += embedding_.packed().size() + (c_.tied ? 0 : head_.packed().size());
  for (const LayerWeights& l : layers_) {
    for (const auto* w : {&l.qkv, &l.wo, &l.gate_up, &l.down}) n += w->packed().size();
    n += (l.qkv_bias.size() + l.q_norm.size() + l.k_norm.size() + l.post_attn_norm.size() + l.post_mlp_norm.size()) *
         sizeof(float);
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
  const std::size_t dim = static_cast<std::size_t>(c_.dim), qd = static_cast<std::size_t>(parts_.heads.count * c_.head_dim),
                    kd = static_cast<std::size_t>(parts_.kv_heads.count * c_.head_dim);
  for (std::size_t r = 0; r < rows; r += kChunkRows) {
    const std::size_t n = std::min(kChunkRows, rows - r);
    attention_inputs_rows(l, h.subspan(r * dim, n * dim), rope_positions.subspan(r, n), q.subspan(r * qd, n * qd),
                          k.subspan(r * kd, n * kd), v.subspan(r * kd, n * kd));
  }
}

void Model::attention_output_and_mlp(int l, std::span<const float> o, std::span<float> h, TpGroup* group) const {
  group = group_for(group, "attention_output_and_mlp");
  const std::size_t rows = h.size() / static_cast<std::size_t>(c_.dim);
  const std::size_t dim = static_cast<std::size_t>(c_.dim), qd = static_cast<std::size_t>(parts_.heads.count * c_.head_dim);
  for (std::size_t r = 0; r < rows; r += kChunkRows) {  // (every rank of a group cuts its rows alike)
    const std::size_t n = std::min(kChunkRows, rows - r);
    attention_output_and_mlp_rows(l, o.subspan(r * qd, n * qd), h.subspan(r * dim, n * dim), group);
  }
}

void Model::attention_inputs_rows(int l, std::span<const float> h, std::span<const std::int64_t> rope_positions,
                                  std::span<float> q, std::span<float> k, std::span<float> v) const {
  const LayerWeights& L = layers_[static_cast<std::size_t>(l)];
  const std::int64_t rows = static_cast<std::int64_t>(h.size()) / c_.dim;
  const std::int64_t heads = parts_.heads.count, kv_heads = parts_.kv_heads.count;
  const std::int64_t qd = heads * c_.head_dim, kd = kv_heads * c_.head_dim, width = qd + 2 * kd;
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
  const std::vector<double>& freq = c_.layer_window(l) > 0 && !inv_freq_local_.empty() ? inv_freq_local_ : inv_freq_;
  rope(q, heads, c_.head_dim, rope_positions, freq, c_.rope_style, threads_);
  rope(k, kv_heads, c_.head_dim, rope_positions, freq, c_.rope_style, threads_);
}

void Model::attention_output_and_mlp_rows(int l, std::span<const float> o, std::span<float> h, TpGroup* group) const {
  const LayerWeights& L = layers_[static_cast<std::size_t>(l)];
  const std::size_t rows = h.size() / static_cast<std::size_t>(c_.dim), ffn = static_cast<std::size_t>(parts_.ffn.count);
  add_projection(L.wo, o, h, group, L.post_attn_norm);
  const std::span<float> n = rows_of(scratch_.norm, h.size());
  const std::span<float> gu = rows_of(scratch_.gate_up, rows * 2 * ffn), act = rows_of(scratch_.act, rows * ffn);
  rms_norm(h, L.mlp_norm, c_.norm_eps, n, threads_);
  L.gate_up.apply(n, gu, false, threads_);
  gated(arch_->activation, gu, rows, ffn, act, threads_);
  add_projection(L.down, act, h, group, L.post_mlp_norm);
}

void Model::logits(std::span<const float> h, std::span<float> out, TpGroup* group) const {
  group = group_for(group, "logits");
  const std::span<float> n = rows_of(scratch_.norm, h.size());
  rms_norm(h, final_norm_, c_.norm_eps, n, threads_);
  if (!group) {
    head_.apply(n, out, false, threads_);
    softcap(out);
    return;
  }
  // This rank's vocabulary columns of every row, then every rank's gathered (rank-major:
  // [rank][rows][its columns]) and laid out as rows of the whole vocabulary.
  const std::size_t rows = h.size() / static_cast<std::size_t>(c_.dim), V = static_cast<std::size_t>(c_.vocab);
  if (out.size() != rows * V)
    throw ringattn::InvalidArgument("logits: " + std::to_string(out.size()) + " floats for " + std::to_string(rows) +
                                    " rows of a vocabulary of " + std::to_string(V));
  if (rows == 0) return;
  std::vector<std::size_t> counts;
  std::size_t at = 0, mine = 0;
  for (std::size_t r = 0; r < parts_.vocab_counts.size(); ++r) {
    if (static_cast<int>(r) == parts_.shard.rank) mine = at;
    counts.push_back(parts_.vocab_counts[r] * rows);
    at += counts.back();
  }
  const std::span<float> all = rows_of(scratch_.logits, rows * V);
  const std::size_t own = static_cast<std::size_t>(parts_.vocab.count);
  head_.apply(n.data(), static_cast<std::int64_t>(rows), c_.dim, all.data() + mine, static_cast<std::int64_t>(own), false,
              threads_);
  group->gather(all, counts);
  std::size_t from = 0, col = 0;
  for (const std::size_t c : parts_.vocab_counts) {
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(from + r * c), c, out.begin() + static_cast<std::ptrdiff_t>(r * V + col));
    from += c * rows;
    col += c;
  }
  softcap(out);
}

void Model::softcap(std::span<float> logits) const {
  if (c_.logit_softcap <= 0) return;
  const double cap = c_.logit_softcap;
  for (float& x : logits) x = static_cast<float>(cap * std::tanh(static_cast<double>(x) / cap));
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
  if (!c_.sliding.empty() || c_.attention_scale > 0 || c_.logit_softcap > 0 || c_.rope_scaling.linear) {
    // (only where set: the digests of the models without them are as before)
    f.value(c_.window);
    f.bytes(c_.sliding.data(), c_.sliding.size());
    for (double x : {c_.rope_theta_local, c_.attention_scale, c_.logit_softcap}) f.value(x);
    f.value(static_cast<int>(c_.rope_scaling.linear));
  }
  if (parts_.split()) {  // a part: which one (a whole model's digest is as before)
    f.value(parts_.shard.rank);
    f.value(parts_.shard.size);
  }
  for (double x : {c_.rope_scaling.factor, c_.rope_scaling.low_freq_factor, c_.rope_scaling.high_freq_factor,
                   c_.rope_scaling.original_context})
    f.value(x);
  auto matrix = [&](const ringattn::Linear& w) {  // its shape, dtype and packed bytes (the same on every CPU)
    f.value(w.out());
    f.value(w.in());
    f.value(static_cast<int>(w.dtype()));
    f.bytes(w.packed().data(), w.packed().size());
    // fp32 activations on block formats give other results: ranks must agree (int8, the
    // default, leaves the digest as before).
    if (w.activations() != ringattn::Activations::int8) f.value(static_cast<int>(w.activations()));
  };
  matrix(embedding_);
  for (const auto& l : layers_) {
    f.floats(l.attn_norm);
    f.floats(l.mlp_norm);
    f.floats(l.qkv_bias);
    f.floats(l.q_norm);
    f.floats(l.k_norm);
    if (!l.post_attn_norm.empty()) {  // (a model without post norms digests as before)
      f.floats(l.post_attn_norm);
      f.floats(l.post_mlp_norm);
    }
    for (const auto* w : {&l.qkv, &l.wo, &l.gate_up, &l.down}) matrix(*w);
  }
  f.floats(final_norm_);
  if (!c_.tied) matrix(head_);  // tied: the embedding's bytes, read above
  return f.h;
}

}  // namespace infer
