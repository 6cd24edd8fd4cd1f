// infer — what a batch asks of the ring, worked out alike on every rank before any call
// (from the batch and the limits all share), so that all fail together rather than some
// waiting on the others: which prompts are prefilled (packed end to end) and which are fed
// through Ring::decode (follow-ups of kept sequences, and a batch too short to cut: fewer
// prompt tokens than ranks) and by which ranks, every rank's rows of the packed batch, this
// rank's tokens and positions, and how many steps the decode takes. job.hpp has the schedule it serves.
#pragma once

#include <cstdint>
#include <vector>

#include <ringattn/packing.hpp>

#include "options.hpp"
#include "prompts.hpp"

namespace infer {

struct BatchPlan {
  std::vector<std::size_t> fresh;          // prompts prefilled, in order
  std::vector<std::size_t> follow;         // prompts fed through Ring::decode, in order
  std::vector<std::size_t> copies;         // samples of an earlier prompt (Prompt::copy_of), in order
  std::vector<Continuation> fed_from;      // per entry of `follow`: where its tokens start
  // Per entry of `follow`: the tokens this rank feeds ([first, end) of its tokens), and the
  // rank that feeds its last one. A follow-up of at least as many tokens as ranks (a cached
  // prefix's new tokens, a prompt's chunk, a session's next message) is dealt over the ranks
  // in contiguous runs, the last on the last rank, so that its layers run in parallel (its
  // queries then visit the stationary shards from every rank: pass-Q); a shorter one (a
  // running reply's token) is the decode rank's alone.
  std::vector<std::pair<std::int64_t, std::int64_t>> follow_rows;
  std::vector<int> follow_last;
  std::vector<std::int64_t> cu;            // the fresh prompts packed: cu_seqlens
  std::vector<std::int32_t> fresh_ids;     // their sequence ids (increasing)
  std::vector<ringattn::PackedShard> shards;  // every rank's rows of the packed batch (none: no fresh prompt)
  ringattn::PackedShard shard;             // this rank's: positions, and documents indexing `fresh`
  std::vector<std::int32_t> token_ids;     // per row of the shard: its token,
  std::vector<std::int32_t> row_ids;       // its sequence id,
  std::vector<std::int64_t> rope_pos;      // and its RoPE position (its place in its prompt)
  int steps = 0;                           // the most tokens any prompt generates
};

// Prompt i's sequence id (its own, or its index) and the tokens it may generate.
std::int32_t sequence_of(const std::vector<Prompt>& prompts, std::size_t i);
int limit_of(const std::vector<Prompt>& prompts, const JobOptions& options, std::size_t i);

// Throws ringattn::InvalidArgument naming the prompt and the limit a batch breaks (an empty
// prompt, sequence ids out of order, too many prompts or rows for max_rows per rank, a
// follow-up without `kept` caches or a decode rank).
BatchPlan plan_batch(const std::vector<Prompt>& prompts, const JobOptions& options, int rank, int world,
                     std::int64_t max_rows, bool kept);

}  // namespace infer
