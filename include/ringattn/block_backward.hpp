// ringattn — the per-node block-attention backward kernel.
//
// Dense attention O = softmax(scale · Q Kᵀ + mask) V has, for a given dO, the gradients
//
//   P_ij  = exp(scale · q_i·k_j − lse_i)        recomputed from the forward's lse
//   D_i   = Σ_e dO_ie O_ie                      once per call (attention_backward_delta)
//   dV_j += Σ_i P_ij dO_i
//   dS_ij = P_ij (dO_i·v_j − D_i)
//   dQ_i += scale Σ_j dS_ij k_j                 dK_j += scale Σ_i dS_ij q_i
//
// Sums over j and i split over blocks: one accumulate() call adds one key/value block's
// share to dQ and that block's whole share (from these queries) to dK and dV. Called for
// every block a query row saw, with the lse of the whole sequence, it gives exactly dense
// attention's gradients — the backward ring calls it once per visiting block.
//
// FlashAttention-2's schedule on a CPU: (kv head, key tile) items in parallel, each
// keeping its dK/dV tile in an fp32 accumulator while it walks the query tiles and the
// query heads of its group (GQA sums without duplicating K/V); per piece five oneDNN
// matmuls (S = QKᵀ, dP = dO Vᵀ, dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K), nothing b × b
// allocated. Tiles the mask or the documents hide are skipped exactly as forward skips
// them (kernels/tile_plan.hpp); a row that sees no key (lse = −inf) gets nothing.
// Layouts as BlockAttention: q, d_o [rows, heads, head_dim], k, v [rows, kv_heads,
// head_dim], in the config's dtype; dq, dk, dv fp32, accumulated into (+=).
//
// Inputs must be finite: accumulate() checks q, k, v, d_o, lse (finite or −inf) and delta
// and throws InvalidArgument naming the first that is not, before anything is added.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "ringattn/block_attention.hpp"

namespace ringattn {

struct GradientStats {
  std::int64_t tiles_computed = 0;  // (query tile, key tile) pairs x heads
  std::int64_t tiles_skipped = 0;   // fully masked ones
  double useful_flops = 0;          // 10 * visible (q, k) pairs * head_dim * heads: 2.5x forward's
};

// delta[r, h] = Σ_e d_o[r, h, e] · o[r, h, e] for fp32 o and d_o [rows, heads, head_dim]
// (the forward's output and its gradient); delta [rows, heads]. Throws InvalidArgument if
// o or d_o holds NaN or inf, or threads is outside 0..kMaxThreads.
void attention_backward_delta(const float* o, const float* d_o, std::int64_t rows, std::int64_t heads,
                              std::int64_t head_dim, float* delta, int threads = 0);

class BlockAttentionBackward {
 public:
  explicit BlockAttentionBackward(const AttentionConfig& cfg);  // validates as BlockAttention
  ~BlockAttentionBackward();
  BlockAttentionBackward(BlockAttentionBackward&&) noexcept;
  BlockAttentionBackward& operator=(BlockAttentionBackward&&) noexcept;

  const AttentionConfig& config() const;
  Isa isa() const;
  DType matmul_dtype() const;
  std::int64_t tile_rows() const;
  std::int64_t tile_keys() const;
  void set_progress_counter(std::atomic<std::uint64_t>* counter);  // one tick per tile

  // Adds block (k, v)'s contributions: dq [nq, heads, head_dim] += this block's share;
  // dk, dv [nk, kv_heads, head_dim] += the share of these queries. lse and delta [nq,
  // heads] are the whole sequence's (the forward's lse; attention_backward_delta).
  // q_docs/k_docs as in BlockAttention::fold (both empty: no documents).
  GradientStats accumulate(const void* q, const Positions& q_pos, std::span<const std::int32_t> q_docs,
                           const void* k, const void* v, const Positions& k_pos,
                           std::span<const std::int32_t> k_docs, const void* d_o, const float* lse,
                           const float* delta, float* dq, float* dk, float* dv);

 private:
  friend struct KernelInternals;
  GradientStats accumulate_impl(const void* q, const Positions& q_pos, std::span<const std::int32_t> q_docs,
                                const void* k, const void* v, const Positions& k_pos,
                                std::span<const std::int32_t> k_docs, const void* d_o, const float* lse,
                                const float* delta, float* dq, float* dk, float* dv, bool check_inputs);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringattn
