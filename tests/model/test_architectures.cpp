// The registry of architectures (infer/model/architecture.hpp): each row is found by its
// Hugging Face and GGUF names and by nothing else, the refusals list exactly the rows, and
// each row carries what differs (the readers read it instead of testing names).
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "job/job_options_table.hpp"
#include "model/architecture.hpp"

using infer::Architecture;

TEST_CASE("architectures: each row is found by its own names, once; the refusals list the rows") {
  std::set<std::string_view> names, hf, gguf;
  for (const Architecture* a : infer::architectures()) {
    CHECK(names.insert(a->name).second);
    if (!a->hf_type.empty()) {
      CHECK(hf.insert(a->hf_type).second);
      CHECK(infer::find_hf_architecture(a->hf_type) == a);
    }
    if (!a->gguf_arch.empty()) {
      CHECK(gguf.insert(a->gguf_arch).second);
      CHECK(infer::find_gguf_architecture(a->gguf_arch) == a);
    }
  }
  CHECK(infer::hf_architecture_names() == "llama, mistral, qwen2, qwen3, gemma3_text, phi3");
  CHECK(infer::gguf_architecture_names() == "llama, qwen2, qwen3, gemma3, phi3");
  for (const char* unknown : {"gpt2", "", "Llama", "qwen2moe", "gemma2", "phi2"}) {
    CHECK(infer::find_hf_architecture(unknown) == nullptr);
    CHECK(infer::find_gguf_architecture(unknown) == nullptr);
  }
}

TEST_CASE("architectures: what each row says differs") {
  auto row = [](std::string_view hf_type) -> const infer::Architecture& {
    const infer::Architecture* a = infer::find_hf_architecture(hf_type);
    REQUIRE(a != nullptr);
    return *a;
  };
  const infer::Architecture &llama = row("llama"), &mistral = row("mistral"), &qwen2 = row("qwen2"), &qwen3 = row("qwen3"),
                            &gemma3 = row("gemma3_text"), &phi3 = row("phi3");
  CHECK(llama.gguf_rope == infer::RopeStyle::interleaved);
  CHECK(qwen2.gguf_rope == infer::RopeStyle::rotate_half);
  CHECK(qwen2.qkv_bias);
  CHECK_FALSE(qwen3.qkv_bias);
  CHECK(qwen3.qk_norm);
  CHECK_FALSE(llama.qk_norm);
  CHECK(mistral.window == infer::SlidingWindow::bounds_context);
  CHECK(qwen3.window == infer::SlidingWindow::refused);
  CHECK(mistral.gguf_arch.empty());  // llama.cpp writes Mistral as "llama"
  // Gemma 3: (1 + w) norms, GeGLU, scaled embedding, post norms, windows by pattern; its MLP
  // pre-norm is pre_feedforward_layernorm (post_attention_layernorm is the attention's post norm).
  CHECK(gemma3.gguf_arch == "gemma3");
  CHECK(gemma3.hf_norm_offset == 1.0f);
  CHECK(gemma3.activation == infer::Activation::gelu_tanh);
  CHECK(gemma3.embedding_scale);
  CHECK(gemma3.post_norms);
  CHECK(gemma3.window == infer::SlidingWindow::pattern);
  CHECK(gemma3.names.mlp_norm.hf == "pre_feedforward_layernorm.weight");
  CHECK(gemma3.names.post_attn_norm.hf == "post_attention_layernorm.weight");
  CHECK(llama.names.mlp_norm.hf == "post_attention_layernorm.weight");
  // Phi-3: fused q/k/v and gate/up, a window on every layer.
  CHECK(phi3.fused_qkv);
  CHECK(phi3.fused_gate_up);
  CHECK(phi3.window == infer::SlidingWindow::every_layer);
  CHECK(phi3.names.gate_up.gguf == "ffn_up.weight");
  CHECK_FALSE(llama.fused_qkv);
}

TEST_CASE("architectures: every program's help names the registry's architectures") {
  using infer::Program;
  for (const Program p : {Program::infer, Program::generate, Program::serve}) {
    std::string all;
    for (const infer::JobOption& o : infer::job_options())
      if (o.taken_by(p)) all += infer::job_option_help(o, p, true) + "\n";
    CHECK_MESSAGE(all.find("architectures}") == std::string::npos, to_string(p) << ": " << all);
    CHECK_MESSAGE(all.find(infer::hf_architecture_names()) != std::string::npos, to_string(p));
    CHECK_MESSAGE(all.find(infer::gguf_architecture_names()) != std::string::npos, to_string(p));
  }
}
