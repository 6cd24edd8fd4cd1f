// infer — Gemma 3 (text; Hugging Face Gemma3ForCausalLM, model_type "gemma3_text"; GGUF
// "gemma3"): the embedding rows times sqrt(dim); RMSNorm gains applied as (1 + w) (a GGUF
// file holds the sums); q and k RMSNorm per head before RoPE; an RMSNorm on the attention's
// and on the MLP's output before each joins the residual; GeGLU with the tanh GELU;
// sliding-window layers (layer_types, or every layer but each sliding_window_pattern-th)
// with their own RoPE base beside global ones; scores scaled by query_pre_attn_scalar^-1/2.
#include "../architecture.hpp"

namespace infer {

extern const Architecture kGemma3{
    .name = "gemma3",
    .hf_type = "gemma3_text",
    .gguf_arch = "gemma3",
    .qk_norm = true,
    .window = SlidingWindow::pattern,
    .activation = Activation::gelu_tanh,
    .hf_activation = "gelu_pytorch_tanh",
    .embedding_scale = true,
    .post_norms = true,
    .hf_norm_offset = 1,
    .query_scalar = true,
    .names = {.mlp_norm = {"pre_feedforward_layernorm.weight", "ffn_norm.weight"}},
};

}  // namespace infer
