// infer — what every rank of a job loads before the ring forms: the model (a llama2.c
// checkpoint, a safetensors file, or weights drawn from a seed), the tokenizer if one is
// given, and the batch of prompts, each checked as it is read. A bad file fails every
// rank here, before any of them waits on the network. The batch job (main.cpp) and
// `ringattn generate` load through this, and agree on what they loaded (agreement.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ringattn/ring.hpp>

#include "model.hpp"
#include "options.hpp"
#include "prompts.hpp"
#include "tokenizer.hpp"

namespace infer {

struct LoadedJob {
  Model model;
  std::optional<Tokenizer> tokenizer;
  std::vector<Prompt> prompts;
  std::string description;  // "model <path> (llama2.c), tokenizer <path>": for a mismatch's message
  // The digest the ranks compare: the weights' and the tokenizer's.
  std::uint64_t digest() const;
};

// The model and tokenizer `opt` names, no prompts (a daemon's, before any request);
// sets opt.model as load_job does.
LoadedJob load_model(JobOptions& opt);

// Reads what `opt` names; sets opt.model to the model's configuration (a llama2.c
// checkpoint's header gives it). The batch holds at most max_batch_tokens tokens. Throws
// ringattn::FileError or InvalidArgument naming the file or flag.
LoadedJob load_job(JobOptions& opt, std::int64_t max_batch_tokens);

// Right after the ring forms: every rank proves it loaded the same model as rank 0 (one
// pass over every weight, so only where there is another rank). Throws as agree_on_model.
void agree_on_job(ringattn::Ring& ring, const LoadedJob& job);

}  // namespace infer
