// infer — loading a model: the seed's weights, a safetensors file, a llama2.c checkpoint,
// a GGUF file or a Hugging Face directory, each into the same layout (assemble), and the
// configuration's checks and tensor list shared by all of them.
#include "model.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <utility>

#include "../formats/gguf.hpp"
#include "architecture.hpp"
#include "gguf_config.hpp"
#include "hf_config.hpp"
#include "../formats/hf_weights.hpp"
#include "../common/input_file.hpp"
#include "../formats/safetensors.hpp"

namespace infer {

namespace {

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
  need(sliding.empty() || (sliding.size() == static_cast<std::size_t>(layers) && window >= 1),
       "sliding-window layers need a window of at least 1 and one entry per layer");
  need(attention_scale >= 0 && std::isfinite(attention_scale), "the attention scale must be finite and not negative");
  need(logit_softcap >= 0 && std::isfinite(logit_softcap), "the logit soft cap must be finite and not negative");
  architecture_named(architecture);  // (throws naming the registry's rows)
}

std::vector<TensorSpec> tensor_specs(const ModelConfig& c) {
  const Architecture& a = architecture_named(c.architecture);
  const TensorNames& n = a.names;
  const std::int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  std::vector<TensorSpec> t;
  auto whole = [&](const TensorName& name, std::vector<std::int64_t> shape) {
    t.push_back({std::string(name.hf), std::move(shape), std::string(name.gguf)});
  };
  whole(n.embedding, {c.vocab, c.dim});
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".", gguf = "blk." + std::to_string(l) + ".";
    auto layer = [&](const TensorName& name, std::vector<std::int64_t> shape) {
      t.push_back({hf + std::string(name.hf), std::move(shape), gguf + std::string(name.gguf)});
    };
    layer(n.attn_norm, {c.dim});
    if (a.fused_qkv) {
      layer(n.qkv, {q + 2 * kv, c.dim});
    } else {
      layer(n.q, {q, c.dim});
      layer(n.k, {kv, c.dim});
      layer(n.v, {kv, c.dim});
    }
    if (c.qkv_bias) {
      layer(n.q_bias, {q});
      layer(n.k_bias, {kv});
      layer(n.v_bias, {kv});
    }
    if (c.qk_norm) {
      layer(n.q_norm, {c.head_dim});
      layer(n.k_norm, {c.head_dim});
    }
    layer(n.o, {c.dim, q});
    if (a.post_norms) layer(n.post_attn_norm, {c.dim});
    layer(n.mlp_norm, {c.dim});
    if (a.fused_gate_up) {
      layer(n.gate_up, {2 * c.ffn, c.dim});
    } else {
      layer(n.gate, {c.ffn, c.dim});
      layer(n.up, {c.ffn, c.dim});
    }
    layer(n.down, {c.dim, c.ffn});
    if (a.post_norms) layer(n.post_mlp_norm, {c.dim});
  }
  whole(n.final_norm, {c.dim});
  if (!c.tied) whole(n.head, {c.vocab, c.dim});
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

// A matrix tensor, or the part of it this rank holds (tensor_parallel.hpp): its rows
// [rows) and columns [cols) of the [out, in] tensor `spec`.
struct Piece {
  const TensorSpec* spec = nullptr;
  Part rows, cols;
  bool whole() const { return rows.count == spec->shape[0] && cols.count == spec->shape[1]; }
};

// w [spec's out, in] cut to the piece's rows and columns.
std::vector<float> cut(std::vector<float> w, const Piece& p) {
  if (p.whole()) return w;
  const std::int64_t in = p.spec->shape[1];
  std::vector<float> out(static_cast<std::size_t>(p.rows.count * p.cols.count));
  for (std::int64_t r = 0; r < p.rows.count; ++r)
    std::copy_n(w.begin() + (p.rows.first + r) * in + p.cols.first, p.cols.count, out.begin() + r * p.cols.count);
  return out;
}

// A model's tensors as assemble() asks for them, by name (tensor_specs). The default
// matrix() packs the tensors' floats; a mapped file's source packs its own bytes.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual std::vector<float> floats(const TensorSpec& t) = 0;
  // The pieces stacked by rows (all of one column count: `in`), held in `dtype`.
  virtual ringattn::Linear matrix(ringattn::DType dtype, std::int64_t in, const std::vector<Piece>& pieces) {
    std::vector<std::vector<float>> values;
    std::vector<ringattn::Linear::Block> blocks;
    for (const Piece& p : pieces) values.push_back(cut(floats(*p.spec), p));
    for (std::size_t i = 0; i < pieces.size(); ++i)
      blocks.push_back({ringattn::DType::f32, values[i].data(), pieces[i].rows.count});
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

// Puts the tensors into the model's layout: the whole model, or the part `parts` names
// (tensor_parallel.hpp). Each matrix is packed as it comes (converted to `dtype` on the
// way), and its source data goes at once: loading holds the packed model and one layer's
// tensors at most. `norm_offset` is added to every norm's gains (a Hugging Face Gemma
// checkpoint's w of (1 + w)).
void assemble(const ModelConfig& c, const TpParts& parts, ringattn::DType dtype, TensorSource& src,
              ringattn::Linear& embedding, std::vector<LayerWeights>& layers, std::vector<float>& final_norm,
              ringattn::Linear& head, float norm_offset = 0) {
  const Architecture& a = architecture_named(c.architecture);
  const TensorNames& names = a.names;
  std::map<std::string, TensorSpec> spec;
  for (TensorSpec& t : tensor_specs(c)) spec[t.name] = std::move(t);
  const std::int64_t hd = c.head_dim, q_all = c.heads * hd, kv_all = c.kv_heads * hd;
  const Part all_dim{0, c.dim}, q_rows{parts.heads.first * hd, parts.heads.count * hd},
      kv_rows{parts.kv_heads.first * hd, parts.kv_heads.count * hd};
  auto shifted = [](Part p, std::int64_t by) { return Part{p.first + by, p.count}; };  // rows of a fused tensor
  auto piece = [&](const std::string& n, Part rows, Part cols) { return Piece{&spec.at(n), rows, cols}; };
  auto matrix = [&](std::initializer_list<Piece> pieces) {
    return src.matrix(dtype, pieces.begin()->cols.count, std::vector<Piece>(pieces));
  };
  auto floats = [&](const std::string& n) { return src.floats(spec.at(n)); };
  auto norm = [&](const std::string& n) {
    std::vector<float> g = floats(n);
    if (norm_offset != 0)
      for (float& x : g) x += norm_offset;
    return g;
  };
  auto run = [&](const std::string& n, Part p) {  // a run of a vector (a bias's rows)
    const std::vector<float> v = floats(n);
    return std::vector<float>(v.begin() + p.first, v.begin() + p.end());
  };
  embedding = matrix({piece(std::string(names.embedding.hf), parts.vocab, all_dim)});
  layers.resize(static_cast<std::size_t>(c.layers));
  for (std::size_t l = 0; l < layers.size(); ++l) {
    LayerWeights& L = layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto name = [&](const TensorName& t) { return p + std::string(t.hf); };
    L.attn_norm = norm(name(names.attn_norm));
    if (a.fused_qkv)
      L.qkv = matrix({piece(name(names.qkv), q_rows, all_dim), piece(name(names.qkv), shifted(kv_rows, q_all), all_dim),
                      piece(name(names.qkv), shifted(kv_rows, q_all + kv_all), all_dim)});
    else
      L.qkv = matrix({piece(name(names.q), q_rows, all_dim), piece(name(names.k), kv_rows, all_dim),
                      piece(name(names.v), kv_rows, all_dim)});
    if (c.qkv_bias)
      for (const auto& [t, rows] : {std::pair{&names.q_bias, q_rows}, {&names.k_bias, kv_rows}, {&names.v_bias, kv_rows}}) {
        const std::vector<float> b = run(name(*t), rows);
        L.qkv_bias.insert(L.qkv_bias.end(), b.begin(), b.end());
      }
    if (c.qk_norm) {
      L.q_norm = norm(name(names.q_norm));
      L.k_norm = norm(name(names.k_norm));
    }
    L.wo = matrix({piece(name(names.o), all_dim, q_rows)});
    if (a.post_norms) L.post_attn_norm = norm(name(names.post_attn_norm));
    L.mlp_norm = norm(name(names.mlp_norm));
    if (a.fused_gate_up)
      L.gate_up = matrix({piece(name(names.gate_up), parts.ffn, all_dim),
                          piece(name(names.gate_up), shifted(parts.ffn, c.ffn), all_dim)});
    else
      L.gate_up = matrix({piece(name(names.gate), parts.ffn, all_dim), piece(name(names.up), parts.ffn, all_dim)});
    L.down = matrix({piece(name(names.down), all_dim, parts.ffn)});
    if (a.post_norms) L.post_mlp_norm = norm(name(names.post_mlp_norm));
  }
  final_norm = norm(std::string(names.final_norm.hf));
  // tied: the same weights, held once
  head = c.tied ? embedding : matrix({piece(std::string(names.head.hf), parts.vocab, all_dim)});
}

// A mapped checkpoint's tensors (a Hugging Face directory, a GGUF file), packed straight
// from the mapping; `name` is the TensorSpec's name the file uses (name or gguf). Each matrix is held in
// `held`, else in the dtype the file stores it in (a GGUF file mixes them).
template <class Weights>
class MappedSource : public TensorSource {
 public:
  MappedSource(Weights& w, std::string TensorSpec::*name, std::optional<ringattn::DType> held)
      : w_(w), name_(name), held_(held) {}
  std::vector<float> floats(const TensorSpec& t) override { return w_.take(t.*name_, t.shape); }
  ringattn::Linear matrix(ringattn::DType dtype, std::int64_t in, const std::vector<Piece>& pieces) override {
    std::vector<ringattn::Linear::Block> blocks;
    std::vector<std::vector<std::byte>> copies;  // pieces of columns, row by row
    copies.reserve(pieces.size());
    for (const Piece& p : pieces) {
      const std::string& name = (*p.spec).*name_;
      const TensorView v = w_.view(name, p.spec->shape);
      const std::int64_t full_in = p.spec->shape[1];
      // The split rule of the table of tensor types: a part's columns are whole blocks.
      const ColumnCut cut = column_cut(ringattn::tensor_type(v.dtype), full_in, p.cols,
                                       "model " + w_.file_of(name) + ": tensor " + name);
      const std::byte* first = v.data + static_cast<std::size_t>(p.rows.first) * cut.row;
      if (p.cols.count != full_in) {  // O's and down's part: each row's run of columns
        std::vector<std::byte>& c = copies.emplace_back(static_cast<std::size_t>(p.rows.count) * cut.take);
        for (std::int64_t r = 0; r < p.rows.count; ++r)
          std::copy_n(first + static_cast<std::size_t>(r) * cut.row + cut.skip, cut.take,
                      c.begin() + static_cast<std::ptrdiff_t>(r) * static_cast<std::ptrdiff_t>(cut.take));
        first = c.data();
      }
      check_finite({v.dtype, first, static_cast<std::uint64_t>(p.rows.count * p.cols.count)}, "weights " + w_.file_of(name), name);
      blocks.push_back({v.dtype, first, p.rows.count});
    }
    // Held in `held`, else each tensor in its own dtype (a Q4_K_M file's Q6_K V beside its
    // Q4_K Q and K: one Linear of two runs).
    ringattn::Linear out(held_, in, std::span<const ringattn::Linear::Block>(blocks));
    (void)dtype;  // assemble()'s: the held dtype is this source's choice
    for (const Piece& p : pieces) w_.release((*p.spec).*name_);  // (a fused tensor's pieces: once each)
    return out;
  }

 private:
  Weights& w_;
  std::string TensorSpec::*name_;
  std::optional<ringattn::DType> held_;
};

}  // namespace

Model Model::from_seed(const ModelConfig& c, std::uint64_t seed, ringattn::DType matrices, TpShard shard) {
  c.check();
  Model m;
  m.configure(c, shard);
  IndexedSource src(c, [&](std::size_t index, const TensorSpec& t) {
    return generate_tensor(seed, static_cast<int>(index), t);
  });
  assemble(c, m.parts_, matrices, src, m.embedding_, m.layers_, m.final_norm_, m.head_);
  return m;
}

Model Model::from_safetensors(const ModelConfig& c, const std::string& path, ringattn::DType matrices, TpShard shard) {
  c.check();
  SafetensorsFile file(path);
  Model m;
  m.configure(c, shard);
  IndexedSource src(c, [&](std::size_t, const TensorSpec& t) { return file.take(t.name, t.shape); });
  assemble(c, m.parts_, matrices, src, m.embedding_, m.layers_, m.final_norm_, m.head_);
  if (const auto extra = file.unused(); !extra.empty())
    throw ringattn::FileError("weights " + path + ": tensor \"" + extra.front() +
                              "\" is not part of this configuration (another --layers, or --untied?)");
  return m;
}

namespace {

// A llama2.c checkpoint's configuration from its 28-byte header (each field in range, the
// shapes consistent); `fail` makes the error naming the file.
ModelConfig llama2c_config(const std::vector<char>& bytes, const std::function<ringattn::FileError(const std::string&)>& fail) {
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
  return c;
}

// The checkpoint's float32 tensors after the header, in tensor_specs' order (layer by layer,
// Hugging Face's names): llama2.c stores each tensor for every layer in turn, its w1 the
// gate, w3 the up and w2 the down projection. The file must be exactly the header and these
// tensors (and the two unused RoPE tables); each tensor is checked finite.
std::vector<std::vector<float>> llama2c_tensors(const ModelConfig& c, const std::vector<char>& bytes,
                                                const std::function<ringattn::FileError(const std::string&)>& fail) {
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
  return order;
}

}  // namespace

Model Model::from_llama2c(const std::string& path, ringattn::DType matrices, TpShard shard) {
  const std::function<ringattn::FileError(const std::string&)> fail = [&](const std::string& what) {
    return ringattn::FileError("model " + path + ": " + what);
  };
  constexpr std::uint64_t kMaxBytes = std::uint64_t{64} << 30;
  const std::vector<char> bytes = read_input_file(path, kMaxBytes, "model");
  const ModelConfig c = llama2c_config(bytes, fail);
  std::vector<std::vector<float>> order = llama2c_tensors(c, bytes, fail);
  Model m;
  m.configure(c, shard);
  IndexedSource src(c, [&](std::size_t index, const TensorSpec&) { return std::move(order[index]); });
  assemble(c, m.parts_, matrices, src, m.embedding_, m.layers_, m.final_norm_, m.head_);
  return m;
}

Model Model::from_gguf(const std::string& path, std::optional<ringattn::DType> matrices, TpShard shard) {
  GgufFile file(path);
  return from_gguf(file, matrices, shard);
}

Model Model::from_gguf(GgufFile& file, std::optional<ringattn::DType> matrices, TpShard shard) {
  const ModelConfig c = gguf_config(file);
  Model m;
  m.configure(c, shard);
  MappedSource<GgufFile> src(file, &TensorSpec::gguf, matrices);
  assemble(c, m.parts_, ringattn::DType::f32, src, m.embedding_, m.layers_, m.final_norm_, m.head_);
  for (const std::string& extra : file.unused())
    if (extra != "rope_freqs.weight")  // read by gguf_config
      throw ringattn::FileError("model " + file.path() + ": tensor \"" + extra + "\" is not part of the model its metadata describes");
  return m;
}

Model Model::from_hf(const std::string& dir, std::optional<ringattn::DType> matrices, TpShard shard) {
  const HfConfigFile config = read_hf_config(dir);
  HfWeights weights(dir);
  return from_hf(config.config, weights, dir, matrices, shard);
}

Model Model::from_hf(const ModelConfig& c, HfWeights& weights, const std::string& dir, std::optional<ringattn::DType> matrices,
                     TpShard shard) {
  Model m;
  m.configure(c, shard);
  MappedSource<HfWeights> src(weights, &TensorSpec::name, matrices);
  assemble(c, m.parts_, ringattn::DType::f32, src, m.embedding_, m.layers_, m.final_norm_, m.head_,
           architecture_named(c.architecture).hf_norm_offset);
  for (const std::string& extra : weights.unused()) {
    // Tolerated: a tied checkpoint that also stores the head, and RoPE tables old exports saved.
    if (c.tied && extra.ends_with("\"lm_head.weight\"")) continue;
    if (extra.ends_with(".rotary_emb.inv_freq\"")) continue;
    throw ringattn::FileError("model " + dir + ": " + extra + " is not part of the model config.json describes");
  }
  return m;
}

}  // namespace infer
