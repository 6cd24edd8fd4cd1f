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
  CHECK(infer::hf_architecture_names() == "llama, mistral, qwen2, qwen3");
  CHECK(infer::gguf_architecture_names() == "llama, qwen2, qwen3");
  for (const char* unknown : {"gpt2", "", "Llama", "qwen2moe", "gemma3"}) {
    CHECK(infer::find_hf_architecture(unknown) == nullptr);
    CHECK(infer::find_gguf_architecture(unknown) == nullptr);
  }
}

TEST_CASE("architectures: what each row says differs") {
  CHECK(infer::kLlama.gguf_rope == infer::RopeStyle::interleaved);
  CHECK(infer::kQwen2.gguf_rope == infer::RopeStyle::rotate_half);
  CHECK(infer::kQwen2.qkv_bias);
  CHECK_FALSE(infer::kQwen3.qkv_bias);
  CHECK(infer::kQwen3.qk_norm);
  CHECK_FALSE(infer::kLlama.qk_norm);
  CHECK(infer::kMistral.hf_window == infer::SlidingWindow::bounds_context);
  CHECK(infer::kQwen3.hf_window == infer::SlidingWindow::refused);
  CHECK(infer::kMistral.gguf_arch.empty());  // llama.cpp writes Mistral as "llama"
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
