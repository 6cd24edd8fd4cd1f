// ringattn — packed variable-length batches: many documents (prompts) laid end to end in
// one sequence, attention kept inside each document.
//
// A batch is described flash-attn style by cumulative lengths: cu_seqlens = {0, n0,
// n0+n1, ...}, B+1 entries for B documents; document d holds the global positions
// [cu_seqlens[d], cu_seqlens[d+1]). Its id is d. Because documents are contiguous runs
// of positions, any rank's rows taken in increasing position order have non-decreasing
// document ids: the invariant Ring::forward and BlockAttention::fold rely on (a query's
// visible keys in a block stay one column range, and a tile's or a block's documents
// are bounded by its first and last row).
//
// shard_documents() balances the causal-within-document work over P ranks:
//   - a heavy document (of at least 2P tokens and more than 1/16 of a rank's share of
//     the work) is cut into 2P chunks (sizes differ by at most one) and dealt as zigzag
//     pairs (chunk i with chunk 2P-1-i), so each pair carries the same causal work up to
//     rounding; the heaviest pair goes to the least-loaded rank, so the rounding does not
//     always favour the same rank;
//   - every other document goes whole to the least-loaded rank, the heaviest first
//     (longest-processing-time order: it adds at most 1/16 of a share of imbalance).
//     Whole documents keep their rows together, which the kernel computes faster than
//     2P scattered chunks of a few tokens each.
// Each rank's positions are then sorted, so they strictly increase.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ringattn/types.hpp"

namespace ringattn {

// One rank's rows of a packed batch.
struct PackedShard {
  std::vector<std::int64_t> positions;  // strictly increasing global positions (rows of the packed tensors)
  std::vector<std::int32_t> documents;  // the document of each row, non-decreasing
};

// Throws InvalidArgument unless cu_seqlens starts at 0, never decreases, has at least two
// entries and at most 2^31 documents. (Zero-length documents are allowed: they hold no rows.)
void check_cu_seqlens(std::span<const std::int64_t> cu_seqlens);

// The document id of every token of the packed sequence [0, cu_seqlens.back()).
std::vector<std::int32_t> document_ids(std::span<const std::int64_t> cu_seqlens);

// Balanced shards (see above). Every position appears on exactly one rank, and every
// rank gets at least one (a rank left empty by tiny documents takes one row of the
// largest shard). Throws InvalidArgument for bad cu_seqlens, fewer tokens than ranks,
// shards outside 1..kMaxWorldSize, or more than shards * kMaxRankRows tokens (types.hpp).
std::vector<PackedShard> shard_documents(std::span<const std::int64_t> cu_seqlens, int shards);

// The naive baseline: the packed sequence cut into P contiguous runs (layout.hpp's
// contiguous layout), each row with its document id. The same checks.
std::vector<PackedShard> shard_documents_contiguous(std::span<const std::int64_t> cu_seqlens, int shards);

// Useful work of each shard: the (query, key) pairs its queries see over the whole
// batch (same document and allowed by `mask`). 4 x pairs x head_dim x heads is what
// ForwardStats::useful_flops counts for the rank.
std::vector<double> visible_pairs(std::span<const std::int64_t> cu_seqlens, const std::vector<PackedShard>& shards,
                                  const Mask& mask);

// max / mean of visible_pairs(): 1 is perfect balance.
double max_over_mean(const std::vector<double>& work);

}  // namespace ringattn
