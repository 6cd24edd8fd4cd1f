// infer — what every rank of a job loads before the ring forms: the model (a llama2.c
// checkpoint, a safetensors file, or weights drawn from a seed), the tokenizer if one is
// given, and the batch of prompts, each checked as it is read. A bad file fails every
// rank here, before any of them waits on the network. The batch job (main.cpp) and
// `ringattn generate` load through this, and agree on what they loaded (agreement.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ringattn/ring.hpp>

#include "chat.hpp"
#include "../model/model.hpp"
#include "options.hpp"
#include "prompts.hpp"
#include "text_tokenizer.hpp"

namespace infer {

struct LoadedJob {
  Model model;
  std::unique_ptr<TextTokenizer> tokenizer;  // none: tokenizer_missing says why
  std::string tokenizer_missing;
  ModelChat chat;  // the model's chat template (chat.hpp)
  std::vector<Prompt> prompts;
  std::string description;  // "model <path> (llama2.c), tokenizer <path>": for a mismatch's message
  // The digest the ranks compare: the weights', the tokenizer's and the chat template's.
  // Of a tensor-parallel part (opt.tp): its part's weights only.
  std::uint64_t digest() const;
  // With tensor parallelism: the whole checkpoint's fingerprint (fingerprint.hpp), the same
  // on every rank whatever part it holds, with the tokenizer's and chat template's digests.
  std::uint64_t fingerprint = 0;
  std::uint64_t whole_digest() const;

 private:
  std::uint64_t with_text(std::uint64_t weights) const;  // mixed with the tokenizer's and template's
};

// The model and tokenizer `opt` names, no prompts (a daemon's, before any request);
// sets opt.model and opt.end_tokens as load_job does.
LoadedJob load_model(JobOptions& opt);

// Reads what `opt` names; sets opt.model to the model's configuration (a llama2.c
// checkpoint's header gives it) and opt.end_tokens to the ids that end its texts. The batch holds at most max_batch_tokens tokens. Throws
// ringattn::FileError or InvalidArgument naming the file or flag.
LoadedJob load_job(JobOptions& opt, std::int64_t max_batch_tokens);

// A model given by its path (generate's and serve's --model): a directory is a Hugging Face
// model, a .gguf file GGUF, anything else a llama2.c checkpoint; sets o.hf, o.gguf or
// o.llama2c. Throws ringattn::InvalidArgument for a bare .safetensors file (its shape is
// not in it: the batch job's --weights with shape flags reads those), naming `flag`.
void set_model_path(JobOptions& o, const std::string& path, const std::string& flag);

// This rank's place in the ring's mesh (RingOptions::group_size consecutive ranks a
// tensor-parallel group): sets opt.tp to its part; returns the most tokens one batch may
// hold (max_rows for each group, which is one rank of the batch plan).
std::int64_t place_in_ring(JobOptions& opt, const ringattn::RingOptions& ring);

// Right after the ring forms: every rank proves it loaded the same model as rank 0 (one
// pass over every weight, so only where there is another rank). With tensor parallelism,
// the whole checkpoint's fingerprint on every rank, then each part against the same part in
// the first group. Throws as agree_on_model.
void agree_on_job(ringattn::Ring& ring, const LoadedJob& job);

}  // namespace infer
