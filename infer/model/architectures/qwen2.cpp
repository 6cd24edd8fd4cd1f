// infer — Qwen2 (and Qwen2.5): Llama's decoder with biases on q, k and v; NEOX
// (rotate-half) RoPE in GGUF files too; its per-layer sliding windows are refused.
#include "../architecture.hpp"

namespace infer {

extern const Architecture kQwen2{
    .name = "qwen2", .hf_type = "qwen2", .gguf_arch = "qwen2", .qkv_bias = true, .window = SlidingWindow::refused};

}  // namespace infer
