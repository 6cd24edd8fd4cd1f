// ringattn — the ring forward schedule: exact attention for this rank's queries while
// the K/V blocks of every rank travel once around the ring.
//
// Schedule (P ranks, this rank r, double buffering):
//
//   A <- my K|V                                     (wire dtype, K then V)
//   for step s = 0 .. P-1:
//     src = (r - s) mod P                           whose block A holds now
//     if s < P-1: post send(A -> successor), post recv(predecessor -> B)
//     fold(Q_r, A, positions of src) into (m, l, o)   -- overlaps both transfers
//     if s < P-1: wait both; check the frame (step s, rows of rank src-1); swap(A, B)
//
// At step s the kernel reads A while the transport sends A and fills B; the two
// buffers are never written while read. A block is relayed with the CRC it arrived
// with, so the CRC is computed once per block, by its owner. A step whose block the
// mask hides completely for this rank (e.g. later ranks' blocks under a contiguous
// causal layout) skips the kernel but still relays the block. Positions are global:
// each block carries the positions of the rank that owns it, for the mask.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "net/transport.hpp"
#include "ringattn/block_attention.hpp"
#include "src/ring/layout.hpp"

namespace ringattn::ring {

struct RingForwardStats {
  double total_seconds = 0;    // the whole pass
  double compute_seconds = 0;  // inside the kernel
  double wait_seconds = 0;     // blocked on the transport after the kernel (exposed communication)
  double useful_flops = 0;
  int steps = 0;
  int steps_skipped = 0;       // fully masked blocks relayed without compute
  std::uint64_t payload_bytes_sent = 0;
};

class KvRing {
 public:
  // The transport must be connected; `attn`'s dtype is the wire dtype.
  KvRing(net::RingTransport& transport, BlockAttention& attn, Layout layout, std::int64_t tokens);

  // This rank's positions (rows of the global tensors it holds).
  const Positions& local_positions() const { return positions_[static_cast<std::size_t>(rank_)]; }

  // Where this rank's own K and V go before forward(): a caller that reads its shard
  // straight into these (and passes them to forward) saves a copy of the block.
  std::span<std::byte> local_k() { return {buf_a_.data(), local_rows() * row_bytes_}; }
  std::span<std::byte> local_v() { return {buf_a_.data() + local_rows() * row_bytes_, local_rows() * row_bytes_}; }

  // q: [local rows, heads, head_dim]; k, v: [local rows, kv_heads, head_dim], all in
  // the attention dtype. `state` must be fresh (or hold earlier partial results to
  // merge into). Returns timing and traffic of the pass.
  RingForwardStats forward(const void* q, const void* k, const void* v, OnlineSoftmaxState& state,
                           std::uint64_t job_id);

  // Called at the start of every step with the block about to be sent and folded. Only
  // the fault-injection tests use it (node/fault.hpp).
  using StepHook = std::function<void(int step, std::span<std::byte> block)>;
  void set_step_hook(StepHook hook) { hook_ = std::move(hook); }

 private:
  std::size_t local_rows() const { return static_cast<std::size_t>(local_positions().size()); }

  net::RingTransport& t_;
  BlockAttention& attn_;
  int rank_, world_;
  net::JobShape shape_;
  std::vector<Positions> positions_;  // every rank's positions
  std::size_t row_bytes_;             // one token of K (or V) in the wire dtype
  std::vector<std::byte> buf_a_, buf_b_;
  StepHook hook_;
};

// The job shape all ranks of a ring must agree on (compared in the HELLO). The digest
// covers what else must match: layout, mask, window, scale.
net::JobShape ring_job_shape(const AttentionConfig& cfg, Layout layout, std::int64_t tokens, int world);

}  // namespace ringattn::ring
