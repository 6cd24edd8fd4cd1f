// infer — the architectures the runtime runs, one row each (infer/model/architectures/,
// one file per architecture), and the one place their names are looked up: a Hugging Face
// config.json's model_type (hf_config.cpp) and a GGUF file's general.architecture
// (gguf_config.cpp) find their row here, and what differs between architectures is read
// from it — never by testing a name elsewhere. Adding an architecture is a file in
// architectures/ and its line in the registry (architecture.cpp).
//
// Today's rows share one decoder (model.cpp: RMSNorm, SwiGLU, RoPE, GQA attention); a row
// says which of its options an architecture takes.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "model.hpp"

namespace infer {

// What an architecture makes of a Hugging Face config.json's sliding-window keys.
enum class SlidingWindow {
  none,           // it has none
  bounds_context, // Mistral: "sliding_window" W bounds the context (exact up to W; longer refused)
  refused,        // Qwen: "use_sliding_window" true is refused (the runtime runs no per-layer windows)
};

struct Architecture {
  std::string_view name{};       // ModelConfig::architecture: "llama"
  std::string_view hf_type{};    // config.json model_type; empty: no Hugging Face form
  std::string_view gguf_arch{};  // GGUF general.architecture; empty: no GGUF form
  // How llama.cpp's converter left a GGUF file's q and k rows: llama's reordered to the
  // interleaved pairs its rope turns, NEOX architectures' as Hugging Face stores them.
  RopeStyle gguf_rope = RopeStyle::rotate_half;
  bool qkv_bias = false;  // biases on q, k and v (qwen2), always (its config has no switch)
  bool qk_norm = false;   // RMSNorm over each head of q and k before RoPE (qwen3)
  SlidingWindow hf_window = SlidingWindow::none;
};

// Every architecture, in the order errors list them.
std::span<const Architecture* const> architectures();
// The row of a config.json model_type or a GGUF general.architecture; null for none.
const Architecture* find_hf_architecture(std::string_view model_type);
const Architecture* find_gguf_architecture(std::string_view arch);
// "llama, mistral, qwen2, qwen3": the names a refusal lists (of the Hugging Face or the GGUF form).
std::string hf_architecture_names();
std::string gguf_architecture_names();

// The rows, one file each in architectures/.
extern const Architecture kLlama;
extern const Architecture kMistral;
extern const Architecture kQwen2;
extern const Architecture kQwen3;

}  // namespace infer
