// infer — every rank proves it holds the same model before the first token: each reads
// its weights (and tokenizer) from its own file, so a rank with another checkpoint, or
// another version of it, would otherwise give wrong text without an error.
//
// Right after the ring forms, ranks 1..P-1 send rank 0 their digest (Model::digest, mixed
// with Tokenizer::digest) and what they loaded ("model /path (llama2.c), tokenizer
// /path"); rank 0 compares every one with its own and answers each rank with the verdict.
// A mismatch fails every rank with one message naming both ranks, both files and both
// digests. Two message types on the ring's public channel (ringattn/messages.hpp).
#pragma once

#include <cstdint>
#include <string>

#include <ringattn/ring.hpp>

namespace infer {

// A tensor-parallel model over `parts` ranks (a mesh's groups): each rank holds one part,
// and rank r compares with rank r % parts, which holds the same part in the first group.
// Throws ringattn::InvalidArgument on every rank when any two ranks disagree.
void agree_on_model(ringattn::Ring& ring, std::uint64_t digest, const std::string& loaded, int parts = 1);

// A model split in `parts` (tensor parallelism; 1: whole on every rank): with parts, first
// `whole` (the checkpoint's fingerprint, the same whatever part a rank holds) on every rank,
// since a group's ranks hold different parts; then `part` (the weights this rank holds)
// against the same part in the first group, where there is one.
void agree_on_parts(ringattn::Ring& ring, std::uint64_t whole, std::uint64_t part, const std::string& loaded, int parts);

}  // namespace infer
