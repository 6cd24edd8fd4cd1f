// infer — the job's command line.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../model/model.hpp"
#include <ringattn/layout.hpp>
#include <ringattn/linear.hpp>
#include <ringattn/types.hpp>

namespace infer {

// Which position RoPE rotates a prompt's token by. `global` (right): the token's place in
// its own prompt, derived from the global packed position shard_documents() returns
// minus the prompt's start. `local` (the seed's positions trap, kept for the test that
// must catch it): the row's index on this rank, which is wrong as soon as a prompt is
// split across ranks.
enum class RopePositions { global, local };

struct JobOptions {
  ModelConfig model;
  std::uint64_t seed = 1;
  std::string weights;  // safetensors file; empty: weights from the seed
  std::string llama2c;  // a llama2.c checkpoint: the model and its shape from its header
  std::string hf;       // a Hugging Face model directory: config.json and safetensors
  std::string gguf;     // a GGUF file: the model from its metadata
  // The tokenizer: a tokenizer.json or llama2.c's tokenizer.bin; empty: the model's own
  // (a Hugging Face directory's tokenizer.json, a GGUF file's vocabulary), text_tokenizer.hpp.
  std::string tokenizer;
  std::optional<std::string> prompt_text;  // one prompt as text (may be ""), instead of a prompts file
  bool chat = false;                       // prompt_text is a user message in the model's chat template
  std::optional<std::string> system;       // with chat: a system message before it
  std::string prompts;
  std::int64_t random_prompt = 0;  // > 0: one prompt of BOS and that many token ids drawn from `seed` (benchmarks)
  std::string out_dir;  // empty: no result files
  int tokens = 4;       // generated per prompt
  float temperature = 0;  // 0: greedy; else llama2.c's sampler (sampler.hpp) with top_p and sample_seed
  float top_p = 0.9f;
  std::uint64_t sample_seed = 1;  // prompt i's generator starts at sample_seed + i
  int threads = 0;      // 0: RINGATTN_THREADS or the library's default
  RopePositions rope = RopePositions::global;
  // Attention's storage type: on the wire and in the KV cache. bf16 halves both; the ring
  // multiplies it in bf16 where the CPU has bf16 units and in fp32 elsewhere.
  ringattn::DType dtype = ringattn::DType::f32;
  // The model's matrices as held and multiplied: fp32, bf16 or fp16 (rounded at load: half
  // the memory and half the bytes a decode step reads; sums stay fp32). Unset: as the
  // checkpoint holds them (a Hugging Face directory's dtype; fp32 for the others).
  std::optional<ringattn::DType> weights_dtype;
  // How block-format matrices (a GGUF file's Q8_0, Q4_K, Q6_K) multiply: int8 activations
  // in integers (fast; within quantization noise) or fp32 (the dequantized weights' results).
  ringattn::Activations activations = ringattn::Activations::int8;
  // How the packed batch is cut over the ranks: none (the default) balances the prompts'
  // causal work (ringattn::shard_documents); a layout cuts the packed sequence as it cuts
  // one sequence (contiguous, zigzag or striped, ringattn/layout.hpp), prompts and all.
  std::optional<ringattn::Layout> layout;
  // Which rank generates every prompt's tokens: none (the default), the rank holding the
  // prompt's last token; a rank (a daemon's 0, which streams them to its clients): the
  // holders send it the last hidden rows after the prefill, and its cache takes the
  // generated rows.
  std::optional<int> decode_rank;
  // This rank's part of a tensor-parallel model (tensor_parallel.hpp): the ring formed in
  // groups of tp.size (RingOptions::group_size), tp.rank = the ring rank % tp.size.
  TpShard tp;
  // The ids that end a generated text: set with the model (load_model; llama2.c's BOS and
  // EOS, a Hugging Face eos_token_id, a GGUF file's end-of-generation tokens), sorted.
  std::vector<std::int32_t> end_tokens{1, 2};
  bool ends_text(std::int32_t token) const { return std::binary_search(end_tokens.begin(), end_tokens.end(), token); }
  // A prompt's generation ends when it chooses an end token (a daemon's): that token is not
  // fed back, and the ring's decode steps end once no rank has a token left to feed.
  // Off: every prompt runs its full count (llama2.c's run.c as `generate` compares it).
  bool stop_at_end = false;
  bool progress = true;  // a line on stderr per prefill layer and per decode step
};

// The batch job's --help: what it does, then every job option it takes
// (job_options_table.hpp), each with its default.
std::string usage();

// The batch job's command line, read through the job options' table: each option's default
// first, then the flags. Throws ringattn::InvalidArgument naming the flag. Returns false for
// --help.
bool parse_args(int argc, char** argv, JobOptions& o);


}  // namespace infer
