// infer — one batch through the ring: packed prefill, then greedy decode on stationary
// KV shards.
//
// Prefill. The prompts are packed end to end (cu_seqlens) and shard_documents() gives
// this rank its rows: strictly increasing global positions and their prompt ids. The
// rank computes embeddings, norms, projections and MLP for those rows only; per layer
// one Ring::forward (causal inside each prompt) brings every other rank's K/V past its
// queries, and the layer's K/V rows stay here as that layer's KVCache.
//
// Positions. The ring and the cache get the global packed positions (the mask is
// evaluated on them, and they must increase along a rank's rows). RoPE gets each token's
// place inside its prompt: global position - cu_seqlens[prompt], whichever rank holds it.
//
// Decode. A prompt's generated tokens belong to the rank holding its last token: that
// rank computes the first logits, and then, per step, the new token's rows of every
// layer. A step's token of prompt d continues d's positions: global cu_seqlens[d+1] + s
// for the ring and the cache, length + s for RoPE. Every rank makes the same calls in
// the same order (one forward per layer, then one decode per layer per step), with 0
// tokens of its own if it owns no prompt. With options.stop_at_end a prompt stops being
// fed once it ends (or its sink says so); the steps end when a step's first decode call
// carries no token from any rank (every rank sees that count, DecodeStats::tokens).
//
// Kept caches (a daemon's sessions). Given `kept` (one KVCache per layer, created on the
// first batch and living as long as the caller keeps it), the prefill rows go there under
// each prompt's `sequence` id, and after the batch every prompt's rows not marked `keep`
// are erased on every rank. A prompt that `continues` a kept sequence is not prefilled:
// the decode rank feeds its tokens through Ring::decode, per layer, after that layer's
// forward — their queries go around the ring past the stationary history, their K/V rows
// are appended where decode_store_rank puts them — and then it decodes like the others.
// Its SequenceResult tells where the sequence goes on next (the last chosen token is not
// fed: it is the next message's first). If run_batch throws, clear `kept`.
//
// Tensor parallelism (a model holding part t of T, Model::parts; the ring formed with
// RingOptions::group_size = T, this rank at place t of its group). Each group of T ranks
// is one rank of everything above: the plan, prefill and decode run across the groups
// (Ring::forward_in / decode_in with Scope::across) on each rank's heads, and the group
// sums its parts after O and down and gathers the logits (tensor_parallel.hpp); every rank
// of a group holds the same rows and chooses the same tokens. decode_rank and the ranks in
// the plan are then ranks across the groups.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <ringattn/kv_cache.hpp>
#include <ringattn/ring.hpp>

#include "../model/model.hpp"
#include "options.hpp"
#include "prompts.hpp"

namespace infer {

struct SequenceResult {
  std::int32_t prompt = 0;            // index in the prompts file
  std::vector<std::int32_t> tokens;   // generated
  std::vector<float> logits;          // [tokens, vocab]: the logits each token was chosen from
  Continuation next;                  // where the last token (chosen, not fed) would go in
  std::uint64_t sampler_state = 0;    // its sampler's state after the last token (Sampler::state)
};

// Every prompt and its generated tokens fit the positions the model was trained for
// (ModelConfig::context, when the checkpoint states it); throws InvalidArgument naming the
// prompt and the numbers.
void check_context(const std::vector<Prompt>& prompts, const JobOptions& options);

struct JobStats {
  std::int64_t rows = 0;              // this rank's prefill rows
  std::int64_t continued_tokens = 0;  // kept sequences' new tokens this rank fed (decode rank)
  double prefill_seconds = 0;
  double prefill_attention_seconds = 0;  // inside Ring::forward
  double decode_seconds = 0;
  double decode_attention_seconds = 0;   // inside Ring::decode
  double decode_compute_seconds = 0;     // of which in the kernel over this rank's cache (DecodeStats::compute_seconds)
  std::int64_t decode_steps = 0;
  std::size_t kv_cache_bytes = 0;  // this rank's K/V held at the end of decode (every layer)
};

// One chosen token, as the rank that generates its prompt sees it.
struct ChosenToken {
  std::int32_t prompt = 0;          // index in the batch
  std::int32_t token = 0;
  std::span<const float> logits;    // [vocab]: the row it was chosen from (valid during the call)
  int step = 0;                     // 0: from the prefill's last rows; s: the s-th decode step
};

// Called on the rank that generates a prompt as soon as each of its tokens is chosen (the
// first one from the prefill's logits), before the next step's work: for streaming. Every
// token of a step is told before any of the next step's. Returns false to end that prompt's
// generation (with options.stop_at_end: its client left, or the caller pauses it: its
// SequenceResult tells where it would go on).
using TokenSink = std::function<bool(const ChosenToken& chosen)>;

// Called on the rank that generates a prompt with the logits a token is about to be chosen
// from (a copy: the sink still sees the model's own), to shape them — a bias, penalties, a
// mask of the tokens a grammar allows. Under tensor parallelism only the group's first rank
// need have one: with options.stop_at_end its choice is the group's (job.hpp, choose()).
using LogitsHook = std::function<void(std::int32_t prompt, std::span<float> logits)>;

// The KV-cache bytes one token's rows take, over every layer, on the rank that holds them
// (head dims padded as the ring's kernels take them).
// (With tensor parallelism over `tp` ranks: a rank's share of the K/V heads.)
std::int64_t cache_row_bytes(const ModelConfig& config, ringattn::DType dtype, int tp = 1);

// Every rank calls this with the same model, prompts and options (and kept caches or none).
std::vector<SequenceResult> run_batch(ringattn::Ring& ring, const Model& model, const std::vector<Prompt>& prompts,
                                      const JobOptions& options, JobStats& stats, const TokenSink& on_token = {},
                                      std::vector<ringattn::KVCache>* kept = nullptr, const LogitsHook& shape = {});

}  // namespace infer
