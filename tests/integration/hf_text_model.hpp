// A seeded Hugging Face model directory with a tokenizer.json of its own, for the tests
// of text through generate and serve: tools/write_hf.py's llama (fp32, vocabulary kVocab)
// and a small byte-level BPE tokenizer written here (the GPT-2 byte characters, a few
// merges, Llama 3's split regex, BOS <|begin_of_text|> added by the post-processor,
// <|end_of_text|> and <|eot_id|> special, transformers' clean-up of spaces). config.json's
// bos_token_id and eos_token_id are the tokenizer's (kBos, kEnd); a test may add a
// generation_config.json, whose eos_token_id then ends the text instead.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "infer/tokenizers/tokenizer_json.hpp"

namespace test::hf_text {

constexpr int kVocab = 300;
constexpr int kBos = 290, kEnd = 291, kEot = 292;
// tokenizer_config.json's chat template: BOS, each message as a header, its trimmed text and
// <|eot_id|>, then the assistant's header.
constexpr const char* kChatTemplate =
    "{{ bos_token }}{% for m in messages %}<|start|>{{ m['role'] }}\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n\n{% endif %}";

// Writes config.json, model.safetensors (seeded by `seed`), tokenizer.json and
// tokenizer_config.json into `dir` (REQUIREs that each step worked).
void write_model(const std::filesystem::path& dir, int seed);
void write_tokenizer(const std::filesystem::path& dir);

// The text of generated ids as the runtime prints them: special tokens skipped, and ids the
// tokenizer lacks (the model has more rows than it has tokens) no text.
std::string printed(const infer::TokenizerJson& tok, const std::vector<int>& ids);

}  // namespace test::hf_text
