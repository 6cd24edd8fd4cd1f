// ringattn — Ulysses' schedule for one attention call (DeepSpeed-Ulysses): the ranks trade
// the token split for a head split, the kernel runs on the whole sequence, and they trade
// back. Ring::forward_ulysses (ring/ulysses.cpp) on the collectives of ring/collectives/.
//
//   1. all-gather of each rank's call header (rows, spec): every rank knows every shard's
//      size and refuses a spec that differs, all alike (the ring stays usable)
//   2. all-gather of the positions (int64, each rank's rows, uneven)
//   3. all-to-all: to rank j, this rank's rows of query heads [j h, (j+1) h), h = heads/P,
//      and of the K/V heads those read (GQA: a K/V head is sent to every rank whose query
//      heads read it, so fewer K/V heads than ranks are replicated)
//   4. the kernel over the whole sequence (tokens sorted by position: any layout) for
//      rank j's heads: one fold of every key into every query, then O and lse
//   5. all-to-all back: each rank's rows of rank j's heads of O and lse
//
// The backward (Ring::backward_ulysses) is the same with dO, lse and D = rowsum(dO o O)
// travelling beside q, k, v in step 3, the backward kernel in step 4, and dQ, dK, dV back
// in step 5, where a K/V head that several ranks held sums their shares (in rank order).
//
// Traffic per rank for N tokens: about (2 - 2/P) N (heads + 2 kv_heads') d element bytes,
// against the ring's (P-1) (N/P) 2 kv_heads d: fewer bytes than the ring once the queries
// are cheap to move (many K/V heads), and no step waits on the slowest link's P-1 hops.
// Needs heads divisible by P, and rank j's query heads reading whole K/V heads or sharing
// one: (heads/P) divisible by heads/kv_heads, or the other way round.
#pragma once

#include <cstdint>
#include <vector>

#include "ring/collectives/all_gather.hpp"
#include "ring/collectives/all_to_all.hpp"
#include "ringattn/block_attention.hpp"

namespace ringattn::ring {

struct UlyssesState {
  UlyssesState(net::Transport& t, std::uint64_t max_frame)
      : gather(t, max_frame, Family::ulysses), a2a(t, max_frame, Family::ulysses) {}
  collectives::AllGather gather;
  collectives::AllToAll a2a;
  std::vector<std::vector<std::byte>> headers, positions, out, in;  // by rank
  std::vector<std::int64_t> all_positions;  // sorted
  std::vector<std::int64_t> slot;           // rank r's row i -> its index in the sorted sequence
  std::vector<std::byte> q, k, v, d_o;      // the whole sequence, this rank's heads, in the call's dtype
  std::vector<std::byte> lse_seq, delta_seq;  // ... fp32 (backward)
  std::vector<float> o, lse;                // forward's results for the whole sequence
  std::vector<float> dq, dk, dv, delta;     // backward's; delta: this rank's rows
  OnlineSoftmaxState state;
};

}  // namespace ringattn::ring
