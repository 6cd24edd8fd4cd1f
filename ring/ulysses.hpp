// ringattn — Ulysses' schedule for one attention call (DeepSpeed-Ulysses): the ranks trade
// the token split for a head split, the kernel runs on the whole sequence, and they trade
// back. Ring::forward with Schedule::ulysses (ring/ulysses.cpp) on the collectives of ring/collectives/.
//
//   1. all-gather of each rank's call header (rows, spec): every rank knows every shard's
//      size and refuses a spec that differs, all alike (the ring stays usable)
//   2. all-gather of the positions (int64, each rank's rows, uneven; with documents, the
//      rows' document ids beside them)
//   3. all-to-all: to rank j, this rank's rows of query heads [j h, (j+1) h), h = heads/P,
//      and of the K/V heads those read (GQA: a K/V head is sent to every rank whose query
//      heads read it, so fewer K/V heads than ranks are replicated)
//   4. the kernel over the whole sequence (tokens sorted by position: any layout) for
//      rank j's heads: one fold of every key into every query, then O and lse
//   5. all-to-all back: each rank's rows of rank j's heads of O and lse
//
// The backward (Ring::backward, Schedule::ulysses) is the same with dO, lse and D = rowsum(dO o O)
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
#include <span>
#include <string>
#include <vector>

#include "ring/collectives/all_gather.hpp"
#include "ring/collectives/all_to_all.hpp"
#include "ring/block_format.hpp"
#include "ringattn/block_attention.hpp"

namespace ringattn::ring {

struct UlyssesState {
  // t: the ranks Ulysses runs over (the whole ring, or one group of a mesh).
  UlyssesState(net::Transport& t, std::uint64_t max_frame)
      : t(t), gather(t, max_frame, Family::ulysses), a2a(t, max_frame, Family::ulysses) {}
  net::Transport& t;
  collectives::AllGather gather;
  collectives::AllToAll a2a;
  std::vector<std::vector<std::byte>> headers, positions, out, in;  // by rank
  std::vector<std::int64_t> all_positions;  // sorted
  std::vector<std::int32_t> all_documents;  // theirs, in that order (a call with documents)
  std::vector<std::int64_t> slot;           // rank r's row i -> its index in the sorted sequence
  std::vector<std::byte> q, k, v, d_o;      // the whole sequence, this rank's heads, in the call's dtype
  std::vector<std::byte> lse_seq, delta_seq;  // ... fp32 (backward)
  std::vector<float> o, lse;                // forward's results for the whole sequence
  std::vector<float> dq, dk, dv, delta;     // backward's; delta: this rank's rows
  OnlineSoftmaxState state;
};

// The call as every rank sees it after the first two steps: every shard's rows, the order
// of the whole sequence, the head split.
struct Plan {
  int P = 1, R = 0;
  std::int64_t n = 0, N = 0, h = 0, hk = 0, group = 0;
  std::vector<std::int64_t> rows, first_row;  // by rank; first_row[j]: rank j's first row in rank order
  std::int64_t first(int j, bool kv) const { return kv ? (j * h) / group : j * h; }
  std::int64_t count(bool kv) const { return kv ? hk : h; }
  // The kernel's call: this rank's heads, the resolved scale.
  AttentionSpec local(const AttentionSpec& spec, float scale) const {
    AttentionSpec l = spec;
    l.heads = h;
    l.kv_heads = hk;
    l.scale = scale;
    return l;
  }
};

// A tensor the head split moves: [rows, heads, width] fp32 rows, of query heads (kv false)
// or K/V heads; on the wire as `wire`.
struct Field {
  const float* src;
  std::int64_t heads, width;
  bool kv;
  DType wire;
};

// Steps 1 and 2: the head split's conditions, the call headers compared (at most max_rows
// rows a rank), the positions (and with cs.documents the rows' documents, `documents`)
// gathered and ordered into u.all_positions (u.all_documents). `who` starts an
// InvalidArgument's text.
Plan plan_call(UlyssesState& u, const std::string& who, std::int64_t max_rows, collectives::ExchangeStats& moved,
               const CallSpec& cs, std::span<const std::int64_t> positions, std::span<const std::int32_t> documents = {});

// Step 3: each field's rows of this rank go to the head split, and come back as the whole
// sequence in position order: dst[f] = [N, count, width] in the field's wire type.
void to_heads(UlyssesState& u, const Plan& p, std::span<const Field> fields, std::span<std::vector<std::byte>* const> dst,
              collectives::ExchangeStats& moved);

// Step 5: fields of the whole sequence in position order ([N, count, width] fp32, src) go
// back to the rows' ranks: out[f] ([n, heads, width], zeroed here) gets rank j's heads added
// at first(j). A K/V head that several ranks held (replicated) is the sum of their shares,
// added in rank order.
void to_rows(UlyssesState& u, const Plan& p, std::span<const Field> fields, std::span<float* const> out,
             collectives::ExchangeStats& moved);

}  // namespace ringattn::ring
