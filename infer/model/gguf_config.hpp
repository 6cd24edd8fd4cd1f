// infer — a GGUF file's model configuration, from its metadata (llama.cpp's keys).
//
// Architectures (general.architecture): llama, qwen2 (q/k/v biases), qwen3 (q/k norms).
// llama.cpp's converter reorders a llama model's q and k rows per head from Hugging Face's
// rotate-half RoPE pairs (i, i + D/2) to the interleaved pairs (2i, 2i + 1) its llama rope
// turns, and keeps qwen2's and qwen3's rows as they are (their rope is NEOX, rotate-half).
// So a llama GGUF runs here with interleaved RoPE on its rows as stored: q . k is the same
// sum over the same pairs, reordered. Llama 3's RoPE scaling comes as a tensor,
// rope_freqs.weight ([head_dim / 2] factors each pair's frequency is divided by).
#pragma once

#include "../formats/gguf.hpp"
#include "model.hpp"

namespace infer {

// Throws ringattn::FileError "model <path>: ..." naming the key for a missing, mistyped or
// out-of-range value, or a setting this runtime does not implement.
ModelConfig gguf_config(GgufFile& file);

}  // namespace infer
