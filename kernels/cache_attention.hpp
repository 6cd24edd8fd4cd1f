// ringattn kernels — decode attention over a KV cache: a few query rows against many
// cached rows, folded into online-softmax states.
//
// Unlike BlockAttention::fold (prefill: b x b tiles, K/V packed once into panels for
// oneDNN's matmuls), decode reads each cached K and V row once per call and does O(1)
// work per byte, so it is bound by memory bandwidth. The kernel streams the cache rows in
// place ([rows, kv_heads, head_dim] in fp32 or bf16), computes the G query heads of a KV
// head together (GQA: K and V are read once per KV head, not once per query head), and
// spreads (segment, query rows, KV head, key chunk) items over the threads; each item
// keeps its own partial (m, l, o), merged into the state at the end (split-K, as in
// flash-decoding). The SIMD loops are the ISA table's cache_* entries.
//
// Inputs must be finite (Ring::decode and KVCache check them on the way in); a NaN or
// inf here propagates as IEEE arithmetic gives it, without the fold's exact contract.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "ringattn/block_attention.hpp"

namespace ringattn::kernels {

// One sequence's queries against its cached rows.
struct CacheSegment {
  const void* k = nullptr;  // [nk, kv_heads, head_dim] in the config's dtype
  const void* v = nullptr;
  const std::int64_t* k_pos = nullptr;  // [nk], strictly increasing
  std::int64_t nk = 0;
  std::int64_t q_begin = 0, q_end = 0;  // the segment's query rows (rows of q, q_pos and the state)
};

struct CacheFoldStats {
  double useful_flops = 0;   // 4 * visible (query, key) pairs * head_dim * heads
  std::int64_t keys_read = 0;  // cached rows streamed (each once for all heads)
};

class CacheAttention {
 public:
  // Same config as BlockAttention (heads, kv_heads, head_dim, dtype of the cache, mask,
  // scale, threads, isa); validates, throws InvalidArgument.
  explicit CacheAttention(const AttentionConfig& cfg);
  ~CacheAttention();
  CacheAttention(CacheAttention&&) noexcept;
  CacheAttention& operator=(CacheAttention&&) noexcept;

  const AttentionConfig& config() const;
  Isa isa() const;

  // Folds every segment's cached rows into the state rows of its queries. q: fp32
  // [rows, heads, head_dim], q_pos [rows] (any order); state.rows == rows. The mask is
  // evaluated on the positions. `progress`, if set, is ticked per item (keep-alives).
  CacheFoldStats fold(const float* q, const std::int64_t* q_pos, std::span<const CacheSegment> segments,
                      OnlineSoftmaxState& state, std::atomic<std::uint64_t>* progress = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringattn::kernels
