// infer — Phi-3 (Hugging Face Phi3ForCausalLM, GGUF "phi3"): Llama's decoder with q, k and
// v in one tensor (qkv_proj; GGUF attn_qkv) and the MLP's gate and up in one (gate_up_proj;
// GGUF ffn_up), a sliding window on every layer (config.json's sliding_window; llama.cpp
// reads the GGUF key but runs without it), NEOX (rotate-half) RoPE in GGUF files too.
#include "../architecture.hpp"

namespace infer {

extern const Architecture kPhi3{
    .name = "phi3",
    .hf_type = "phi3",
    .gguf_arch = "phi3",
    .window = SlidingWindow::every_layer,
    .fused_qkv = true,
    .fused_gate_up = true,
};

}  // namespace infer
