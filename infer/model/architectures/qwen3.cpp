// infer — Qwen3: Llama's decoder with RMSNorm over each head of q and k (gains [head_dim])
// before RoPE; NEOX (rotate-half) RoPE in GGUF files too; its per-layer sliding windows are
// refused.
#include "../architecture.hpp"

namespace infer {

extern const Architecture kQwen3{
    .name = "qwen3", .hf_type = "qwen3", .gguf_arch = "qwen3", .qk_norm = true, .window = SlidingWindow::refused};

}  // namespace infer
