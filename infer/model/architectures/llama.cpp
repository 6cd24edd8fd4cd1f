// infer — Llama (Llama 2 and 3, and llama2.c's checkpoints): RMSNorm, SwiGLU, RoPE, GQA, no
// biases. llama.cpp's converter reorders a GGUF file's q and k rows per head to the
// interleaved pairs its llama rope turns; Llama 3's rope scaling comes as rope_scaling
// "llama3" (config.json) or rope_freqs.weight (GGUF).
#include "../architecture.hpp"

namespace infer {

extern const Architecture kLlama{
    .name = "llama", .hf_type = "llama", .gguf_arch = "llama", .gguf_rope = RopeStyle::interleaved};

}  // namespace infer
