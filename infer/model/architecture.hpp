// infer — the architectures the runtime runs, one row each (infer/model/architectures/,
// one file per architecture), and the one place their names are looked up: a Hugging Face
// config.json's model_type (hf_config.cpp) and a GGUF file's general.architecture
// (gguf_config.cpp) find their row here, and what differs between architectures is read
// from it — never by testing a name elsewhere. Adding an architecture is a file in
// architectures/ and its line in the registry (architecture.cpp).
//
// The rows share one decoder (model.cpp: RMSNorm, a gated MLP, RoPE, GQA attention); a row
// says which of its options an architecture takes and what its tensors are called.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "model.hpp"

namespace infer {

// What an architecture makes of its configuration's sliding-window keys.
enum class SlidingWindow {
  none,           // it has none
  bounds_context, // Mistral: "sliding_window" W bounds the context (exact up to W; longer refused)
  refused,        // Qwen: "use_sliding_window" true is refused (its windows are not implemented)
  every_layer,    // Phi-3: "sliding_window" W on every layer (a query sees the keys q - k < W)
  pattern,        // Gemma 3: the layers its layer types name slide (W keys), with a RoPE base of their own
};

// The MLP's gate: down · (act(gate · n) * (up · n)).
enum class Activation {
  silu,       // SwiGLU: x / (1 + e^-x)
  gelu_tanh,  // GeGLU with the tanh GELU: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
};

// One tensor's name in a Hugging Face checkpoint and in a GGUF file (llama.cpp's converter's
// name); a layer's after "model.layers.N." and "blk.N.".
struct TensorName {
  std::string_view hf{}, gguf{};
};

// Every tensor a row may have, named as Llama's (the defaults); a row names what differs.
struct TensorNames {
  TensorName embedding{"model.embed_tokens.weight", "token_embd.weight"};
  TensorName final_norm{"model.norm.weight", "output_norm.weight"};
  TensorName head{"lm_head.weight", "output.weight"};
  TensorName attn_norm{"input_layernorm.weight", "attn_norm.weight"};
  TensorName q{"self_attn.q_proj.weight", "attn_q.weight"};
  TensorName k{"self_attn.k_proj.weight", "attn_k.weight"};
  TensorName v{"self_attn.v_proj.weight", "attn_v.weight"};
  TensorName qkv{"self_attn.qkv_proj.weight", "attn_qkv.weight"};  // fused_qkv: q, k, v rows in one
  TensorName q_bias{"self_attn.q_proj.bias", "attn_q.bias"};
  TensorName k_bias{"self_attn.k_proj.bias", "attn_k.bias"};
  TensorName v_bias{"self_attn.v_proj.bias", "attn_v.bias"};
  TensorName q_norm{"self_attn.q_norm.weight", "attn_q_norm.weight"};
  TensorName k_norm{"self_attn.k_norm.weight", "attn_k_norm.weight"};
  TensorName o{"self_attn.o_proj.weight", "attn_output.weight"};
  TensorName post_attn_norm{"post_attention_layernorm.weight", "post_attention_norm.weight"};  // post_norms
  TensorName mlp_norm{"post_attention_layernorm.weight", "ffn_norm.weight"};
  TensorName gate{"mlp.gate_proj.weight", "ffn_gate.weight"};
  TensorName up{"mlp.up_proj.weight", "ffn_up.weight"};
  TensorName gate_up{"mlp.gate_up_proj.weight", "ffn_up.weight"};  // fused_gate_up: gate rows, then up
  TensorName down{"mlp.down_proj.weight", "ffn_down.weight"};
  TensorName post_mlp_norm{"post_feedforward_layernorm.weight", "post_ffw_norm.weight"};  // post_norms
};

struct Architecture {
  std::string_view name{};       // ModelConfig::architecture: "llama"
  std::string_view hf_type{};    // config.json model_type; empty: no Hugging Face form
  std::string_view gguf_arch{};  // GGUF general.architecture; empty: no GGUF form
  // How llama.cpp's converter left a GGUF file's q and k rows: llama's reordered to the
  // interleaved pairs its rope turns, NEOX architectures' as Hugging Face stores them.
  RopeStyle gguf_rope = RopeStyle::rotate_half;
  bool qkv_bias = false;  // biases on q, k and v (qwen2), always (its config has no switch)
  bool qk_norm = false;   // RMSNorm over each head of q and k before RoPE (qwen3, gemma3)
  SlidingWindow window = SlidingWindow::none;
  // The MLP's activation, and the name config.json's hidden_act (or hidden_activation) gives it.
  Activation activation = Activation::silu;
  std::string_view hf_activation = "silu";
  bool embedding_scale = false;  // the embedding rows times sqrt(dim) (gemma3)
  // An RMSNorm on the attention's and on the MLP's output before each joins the residual
  // (gemma3's post_attention_layernorm and post_feedforward_layernorm).
  bool post_norms = false;
  // What a Hugging Face checkpoint's norm gains are short of the gains applied: Gemma
  // multiplies by (1 + w). GGUF files hold the applied gains (llama.cpp's converter adds it).
  float hf_norm_offset = 0;
  // The scores' scale from config.json's query_pre_attn_scalar s (s^-1/2; gemma3) rather
  // than 1/sqrt(head_dim); from GGUF, llama.cpp's rule (gguf_config.cpp).
  bool query_scalar = false;
  bool fused_qkv = false;      // one qkv tensor (phi3): its q, k and v rows cut as three
  bool fused_gate_up = false;  // one gate_up tensor (phi3): its gate and up rows cut as two
  TensorNames names{};
};

// Every architecture, in the order errors list them.
std::span<const Architecture* const> architectures();
// The row of a config.json model_type or a GGUF general.architecture; null for none.
const Architecture* find_hf_architecture(std::string_view model_type);
const Architecture* find_gguf_architecture(std::string_view arch);
// The row named `name` (ModelConfig::architecture); throws ringattn::InvalidArgument naming
// the registry's rows for a name it does not hold.
const Architecture& architecture_named(std::string_view name);
// "llama, mistral, qwen2, ...": the names a refusal lists (of the Hugging Face or the GGUF form).
std::string hf_architecture_names();
std::string gguf_architecture_names();

}  // namespace infer
