// ringattn — one rank's KV cache of one layer, for decode on stationary shards.
//
// After a prefill each rank keeps the K/V rows it already holds; decode never moves
// them. Each generated token's K/V is appended on one rank (decode_store_rank), its
// query visits every rank, and the partial (m, l, o) states come back to the rank that
// asked (Ring::decode). The cache is the library's memory, one object per layer on
// each rank: rows are kept per sequence (a prompt of a packed batch is a sequence, its
// document id the sequence id), each sequence's rows in increasing position order.
//
//   ringattn::KVCache cache(spec.kv_heads, spec.head_dim, DType::bf16);   // per layer
//   ring.forward({spec, q, k, v, positions, documents}, o);                // packed prefill
//   cache.append_packed(positions, documents, k, v);                       // keep this rank's rows
//   for (each generated token) ring.decode({spec, q, k, v, positions, sequences}, cache, o);
//
// Positions are whatever the prefill passed to the ring (global positions of the packed
// batch, or positions inside each document): the mask is evaluated on them, so decode
// tokens of a sequence must continue its positions (strictly greater than every cached
// position of that sequence). Each rank checks the rows it stores against its own cache;
// that a position is not cached on another rank too is the caller's part (prefill and
// decode positions from one numbering, as shard_documents and decode_store_rank give them).
//
// Storage: K and V in `dtype` (bf16 halves the memory; accumulation stays fp32), rows of
// [kv_heads, head_dim]. Appends grow a sequence's arrays like a std::vector (amortised
// doubling); reserve() first when the final length is known. An append that fails (a bad
// row, or out of memory) leaves the cache as it was. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ringattn/types.hpp"

namespace ringattn {

class KVCache {
 public:
  // Throws InvalidArgument for kv_heads or head_dim outside 1..2^16 (the ring's limits' range).
  KVCache(std::int64_t kv_heads, std::int64_t head_dim, DType dtype = DType::f32);
  KVCache(KVCache&&) noexcept;
  KVCache& operator=(KVCache&&) noexcept;
  ~KVCache();

  std::int64_t kv_heads() const;
  std::int64_t head_dim() const;
  DType dtype() const;

  // Appends rows of one sequence (id >= 0): positions strictly increasing, each above the
  // sequence's last cached position; k and v fp32 [rows, kv_heads, head_dim], finite.
  // Throws InvalidArgument naming the first bad row; nothing is appended then.
  void append(std::int32_t sequence, std::span<const std::int64_t> positions, std::span<const float> k,
              std::span<const float> v);
  // The rows of a packed prefill call as they were passed to Ring::forward: row i belongs
  // to sequence documents[i]. The same checks, per sequence; all or nothing.
  void append_packed(std::span<const std::int64_t> positions, std::span<const std::int32_t> documents,
                     std::span<const float> k, std::span<const float> v);
  // The same with K and V already in dtype() (raw elements; for a bf16 cache, bf16 bits).
  // Checked for NaN and inf like the others.
  void append_raw(std::int32_t sequence, std::span<const std::int64_t> positions, const void* k, const void* v);

  void reserve(std::int32_t sequence, std::int64_t rows);
  void erase(std::int32_t sequence);  // a finished prompt frees its rows
  // Gives back a sequence's spare capacity (reserve()'s, or appends' doubling) and forgets
  // a sequence reserved here that holds no row: for rows kept long after they were made.
  void shrink(std::int32_t sequence);
  // Keeps the first `rows` rows of a sequence (no-op if it holds fewer): takes back
  // tokens, e.g. a decode step that failed, or speculative tokens that were rejected.
  void truncate(std::int32_t sequence, std::int64_t rows);
  void clear();

  std::int64_t rows() const;                         // all sequences
  std::int64_t rows(std::int32_t sequence) const;    // 0 for an unknown sequence
  std::size_t bytes() const;                         // K and V held (not counting spare capacity)
  std::vector<std::int32_t> sequences() const;       // increasing ids

  // A sequence's rows in place: positions [rows], k and v [rows, kv_heads, head_dim] in
  // dtype(). Valid until the next append, reserve, erase or clear. Empty if unknown.
  struct View {
    std::span<const std::int64_t> positions;
    const void* k = nullptr;
    const void* v = nullptr;
  };
  View view(std::int32_t sequence) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The rank that stores the K/V of the decode token of `sequence` at `position` in a ring of
// `world_size`: (sequence + position) mod world_size. Consecutive tokens of a sequence go
// to consecutive ranks and different sequences start at different ranks, so the caches
// grow evenly whatever the batch; every rank computes it from the token alone.
int decode_store_rank(std::int32_t sequence, std::int64_t position, int world_size);

}  // namespace ringattn
