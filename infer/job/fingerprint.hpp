// infer — one fingerprint of the whole model for every rank, whatever part it holds.
//
// A rank of a tensor-parallel group reads and digests only its part of the weights
// (Model::digest), so a part can be compared with the same part in another group
// (agreement.hpp) but never with its group mates' parts, and a mesh of one group compares
// nothing. This fingerprint is the same on every rank that holds the same checkpoint: the
// model's configuration and held dtype, and of each file the model came from its size, its
// first 64 KiB and 64 KiB at 63 offsets spread evenly over it (4 MiB read at most per
// file). Two checkpoints of one shape (another fine-tune, another seed) differ in every
// sample; two files that differ in a few bytes only may not — the per-part digests still
// compare whole parts across groups.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "options.hpp"

namespace infer {

class ModelFiles;
struct ModelConfig;

// FNV-1a over each file's size and samples, in the order given. Throws ringattn::FileError
// naming a file that cannot be read.
std::uint64_t files_fingerprint(const std::vector<std::string>& files);

// The fingerprint of the model `opt` names, loaded with configuration `c`: the files (a
// Hugging Face directory's config.json and the safetensors its weights came from, a GGUF
// file — both sampled as `files` holds them mapped —, a llama2.c checkpoint, --weights), or
// the seed; with c and the held dtype.
std::uint64_t model_fingerprint(const JobOptions& opt, ModelFiles& files, const ModelConfig& c);

}  // namespace infer
