// infer — a small Llama-style decoder's weights and its per-token math.
//
// Per layer: h += Wo · attention(RoPE(Wq · n), RoPE(Wk · n), Wv · n) with n = RMSNorm(h),
// then h += Wdown · (silu(Wgate · n) * (Wup · n)) with n = RMSNorm(h); logits =
// head · RMSNorm(h) at the end, the head tied to the embedding or separate. What an
// architecture changes in this (q/k norms, biases, GeGLU, post norms, a scaled embedding,
// sliding-window layers) its row says (architecture.hpp). Attention is
// not here: it is the ring's (main.cpp); everything here works on one token's row at a
// time, so a rank computes exactly its own rows and the result of a row does not depend
// on which rank computes it or beside which other rows (the sums run in a fixed order).
//
// Tensor names and shapes are Hugging Face Llama's ([out, in], "model.layers.0.mlp.
// up_proj.weight", ...), so a converted checkpoint of this shape loads unchanged. Every
// matrix is a ringattn::Linear (include/ringattn/linear.hpp): packed once in the weights'
// dtype, multiplied on the ISA path the attention kernels use, threaded, and batch
// invariant (a row's result is bitwise the same whatever rows share the matmul). Q, K
// and V are one stacked matrix, and so are the MLP's gate and up: one pass over the
// normalised rows each.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ringattn/linear.hpp>

#include "tensor_parallel.hpp"

namespace infer {

class GgufFile;
class HfWeights;
struct Architecture;

// How RoPE pairs a head's elements: Hugging Face Llama's rotate-half (i, i + D/2), or
// llama2.c's interleaved pairs (2i, 2i + 1), which its own checkpoints are trained with.
enum class RopeStyle { rotate_half, interleaved };

// Llama 3's RoPE scaling (rope_scaling of rope_type "llama3"): long wavelengths divided by
// `factor`, short ones kept, a smooth blend between (factor 0: none).
// Or "linear" (linear true): every frequency divided by factor.
struct RopeScaling {
  double factor = 0;
  bool linear = false;
  double low_freq_factor = 0, high_freq_factor = 0;
  double original_context = 0;  // original_max_position_embeddings
};

struct ModelConfig {
  std::string architecture = "llama";  // its row's name (architecture.hpp: llama, mistral, qwen2, qwen3)
  std::int64_t vocab = 256;
  std::int64_t dim = 128;
  std::int64_t layers = 2;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 32;
  std::int64_t ffn = 256;
  bool tied = true;  // the output head is the embedding
  double rope_theta = 10000;
  RopeStyle rope_style = RopeStyle::rotate_half;
  RopeScaling rope_scaling;
  std::vector<float> rope_factors;  // GGUF's rope_freqs: pair i's frequency divided by [i] (empty: none)
  float norm_eps = 1e-5f;
  bool qkv_bias = false;  // qwen2: biases on q, k and v
  bool qk_norm = false;   // qwen3: RMSNorm over each head of q and k (gains [head_dim]) before RoPE
  std::int64_t context = 0;  // positions the model was trained for (0: not stated); a Mistral
                             // sliding window bounds it (attention is exact up to the window)
  // Sliding-window layers (architecture.hpp's SlidingWindow): layer l's queries see only the
  // keys q - k < window where sliding[l] is 1 (empty: no layer slides). Those layers turn
  // RoPE at rope_theta_local (0: rope_theta) without rope_scaling or rope_factors.
  std::int64_t window = 0;
  std::vector<std::uint8_t> sliding;
  double rope_theta_local = 0;
  double attention_scale = 0;  // the scores' scale (0: 1/sqrt(head_dim))
  double logit_softcap = 0;    // logits = c tanh(logits / c) (0: none; final_logit_softcapping)

  std::int64_t layer_window(std::int64_t l) const {  // 0: layer l attends causally to all
    return !sliding.empty() && sliding[static_cast<std::size_t>(l)] ? window : 0;
  }

  void check() const;  // throws ringattn::InvalidArgument naming the bad size
};

// A tensor the model needs, in the order the seed generator draws them: its Hugging Face
// name (the seed's and a safetensors file's too), its GGUF name and its shape, from the
// architecture's row.
struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string gguf;
};
std::vector<TensorSpec> tensor_specs(const ModelConfig& c);

// One layer's weights; on a rank of a tensor-parallel group its part of them
// (tensor_parallel.hpp: its heads' Q, K, V rows and O columns, its ffn units' rows and
// columns; norms whole).
struct LayerWeights {
  std::vector<float> attn_norm, mlp_norm;
  std::vector<float> qkv_bias;        // [heads*head_dim + 2*kv_heads*head_dim] (qkv_bias), else empty
  std::vector<float> q_norm, k_norm;  // [head_dim] each (qk_norm), else empty
  std::vector<float> post_attn_norm, post_mlp_norm;  // [dim] each (the row's post_norms), else empty
  ringattn::Linear qkv;      // [heads*head_dim + 2*kv_heads*head_dim, dim]: q, k, v stacked
  ringattn::Linear wo;       // [dim, heads*head_dim]
  ringattn::Linear gate_up;  // [2*ffn, dim]: gate, then up
  ringattn::Linear down;     // [dim, ffn]
};

class Model {
 public:
  // Every loader takes the dtype the matrices are held in: f32 as they come, or bf16 (each
  // weight rounded to nearest even at load: half the memory and the bytes a decode step
  // reads; the embedding too, its rows widened at lookup; norms stay fp32).
  // Weights drawn from `seed` (generate_tensor below): the same on every machine.
  // Every loader also takes the rank's place in a tensor-parallel group (`shard`, default
  // the whole model): it then packs only that rank's part of each tensor (tensor_parallel.hpp),
  // a mapped file's other parts never read; TpParts::of's refusals name a split that cannot be.
  static Model from_seed(const ModelConfig& c, std::uint64_t seed, ringattn::DType matrices = ringattn::DType::f32,
                         TpShard shard = {});
  // Weights from a safetensors file (F32, the names of tensor_specs); every tensor of the
  // configuration must be there with its shape, and nothing else.
  static Model from_safetensors(const ModelConfig& c, const std::string& path,
                                ringattn::DType matrices = ringattn::DType::f32, TpShard shard = {});
  // A llama2.c checkpoint (version 0, "legacy": seven int32 — dim, hidden_dim, n_layers,
  // n_heads, n_kv_heads, vocab_size (negative: a separate classifier at the end),
  // seq_len — then float32 tensors, each for every layer in turn), its configuration from
  // that header (interleaved RoPE, theta 10000, eps 1e-5). Throws ringattn::FileError
  // "model <path>: ..." for a header out of range or a size that is not exactly its
  // tensors', before it reads a weight.
  static Model from_llama2c(const std::string& path, ringattn::DType matrices = ringattn::DType::f32, TpShard shard = {});
  // A Hugging Face model directory: config.json (hf_config.hpp) and model.safetensors or a
  // sharded model.safetensors.index.json, F32, BF16 or F16, mapped and packed tensor by
  // tensor. The matrices are held in `matrices`, else each in the dtype the file stores it in. Every tensor's name and shape is checked against the configuration;
  // throws ringattn::FileError naming the file and the tensor.
  static Model from_hf(const std::string& dir, std::optional<ringattn::DType> matrices = std::nullopt, TpShard shard = {});
  // The same from a directory read already (its configuration `c`, its mapped `weights`; a
  // job's ModelFiles opens each once); `dir` names it in errors.
  static Model from_hf(const ModelConfig& c, HfWeights& weights, const std::string& dir,
                       std::optional<ringattn::DType> matrices = std::nullopt, TpShard shard = {});
  // A GGUF file (gguf_config.hpp: the registry's architectures; F32, F16, BF16, Q8_0,
  // Q4_K, Q6_K tensors), mapped and packed tensor by tensor as from_hf; each matrix held as
  // stored (the block formats as blocks, unpacked a panel's run at a time; a Q4_K_M file's
  // mixed Q/K/V as runs of each) unless `matrices` says (Q4_K, Q6_K: fp32, bf16, fp16, q8_0).
  // A tensor-parallel part of O's or down's columns must start on a block (32 or 256 values).
  static Model from_gguf(const std::string& path, std::optional<ringattn::DType> matrices = std::nullopt,
                         TpShard shard = {});
  // The same from a file mapped and parsed already (a job's ModelFiles), whose tensors it marks used.
  static Model from_gguf(GgufFile& file, std::optional<ringattn::DType> matrices = std::nullopt, TpShard shard = {});

  const ModelConfig& config() const { return c_; }  // the whole model's, also on a part of it
  const TpParts& parts() const { return parts_; }     // what this rank holds of it
  ringattn::DType matrices_dtype() const { return embedding_.dtype(); }  // (the embedding's; a GGUF file may mix)
  // OpenMP threads of every matmul (0: OpenMP's default, all cores unless OMP_NUM_THREADS
  // says otherwise). The result does not depend on it.
  void set_threads(int threads) { threads_ = threads; }
  int threads() const { return threads_; }
  // How every block-format matrix (q8_0, q4_k, q6_k) multiplies its rows: int8 (the
  // default: 8-bit activations, integer dot products) or fp32 (the dequantized weights'
  // results). Other dtypes are untouched.
  void set_activations(ringattn::Activations a);
  // Whether any matrix is held in a block format (q8_0, q4_k, q6_k).
  bool quantized() const;
  // A 64-bit digest of the configuration and every weight (FNV-1a over their bytes, in
  // one fixed order): two ranks whose digests agree hold the same model, whatever file
  // format or path it came from (a part of a model: the same part, its place mixed in).
  std::uint64_t digest() const;
  // The bytes the weights hold in memory (packed matrices, norms; a tied head counted once).
  std::size_t weight_bytes() const;

  // The calls below are const but share the model's scratch rows: one call at a time.
  // A part of a model (parts().split()) needs its group for embed, attention_output_and_mlp
  // and logits (every rank of the group calls alike; InvalidArgument without one); heads
  // and kv_heads below are then the rank's (parts().heads.count, ...), dim and vocab whole.
  // x [rows, dim] = embedding rows of the tokens.
  void embed(std::span<const std::int32_t> tokens, std::span<float> x, TpGroup* group = nullptr) const;
  // q [rows, heads*head_dim], k and v [rows, kv_heads*head_dim] of layer l for hidden rows h,
  // RoPE applied at rope_positions [rows].
  void attention_inputs(int l, std::span<const float> h, std::span<const std::int64_t> rope_positions,
                        std::span<float> q, std::span<float> k, std::span<float> v) const;
  // h += Wo · o, then the MLP block, in place on h [rows, dim].
  void attention_output_and_mlp(int l, std::span<const float> o, std::span<float> h, TpGroup* group = nullptr) const;
  // logits [rows, vocab] of the hidden rows h.
  void logits(std::span<const float> h, std::span<float> out, TpGroup* group = nullptr) const;

 private:
  // The passes above over one chunk of rows.
  void attention_inputs_rows(int l, std::span<const float> h, std::span<const std::int64_t> rope_positions,
                             std::span<float> q, std::span<float> k, std::span<float> v) const;
  void attention_output_and_mlp_rows(int l, std::span<const float> o, std::span<float> h, TpGroup* group) const;
  // h += W · x (RMSNorm(W · x) with gains post_norm, unless empty), the parts' sum over the
  // group where the model is split.
  void add_projection(const ringattn::Linear& w, std::span<const float> x, std::span<float> h, TpGroup* group,
                      const std::vector<float>& post_norm) const;
  TpGroup* group_for(TpGroup* group, const char* call) const;  // the group a split model needs
  void softcap(std::span<float> logits) const;                  // c tanh(x / c) where the config caps

  void configure(const ModelConfig& c, TpShard shard);  // c_, parts_, and RoPE's frequencies
  ModelConfig c_;
  const Architecture* arch_ = nullptr;  // c_.architecture's row
  TpParts parts_;
  std::vector<double> inv_freq_;  // RoPE's angle per position of each pair (scaling applied)
  std::vector<double> inv_freq_local_;  // the sliding-window layers' (rope_theta_local), else empty
  int threads_ = 0;
  // The layers' intermediate rows, grown to the largest call and kept: a prefill of 2,048
  // rows would otherwise fault in and zero ~200 MB of fresh pages per layer. One call at a
  // time per Model (the ring runs one batch at a time anyway).
  struct Scratch {
    std::vector<float> norm, qkv, gate_up, act, part, logits;
  };
  mutable Scratch scratch_;
  ringattn::Linear embedding_;  // [vocab, dim] (a part: its vocab rows), looked up a row at a time (Linear::row)
  std::vector<LayerWeights> layers_;
  std::vector<float> final_norm_;
  ringattn::Linear head_;  // [vocab, dim]: tied, a copy of embedding_ sharing its weights
};

// The seed generator, portable by construction (integer arithmetic mod 2^64 only, then
// exact float32 steps): element i of tensor number t is splitmix64's finaliser of
// key_t + (i + 1) * 0x9E3779B97F4A7C15 with key_t = finaliser(seed + (t + 1) * 0xD1B54A32D192ED03),
// its top 24 bits u in [0, 1), then a = 2u - 1 (exact) and w = a * float(1/sqrt(fan_in))
// for a matrix [out, in] (fan_in = in), w = 1 + 0.1f * a for a norm's gains.
// tools/write_weights.py draws the same numbers with numpy.
std::vector<float> generate_tensor(std::uint64_t seed, int index, const TensorSpec& spec);


}  // namespace infer
