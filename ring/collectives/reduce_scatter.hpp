// ringattn — the ring reduce-scatter of an fp32 array: rank r ends with the reduction
// over every rank's array of chunk r (counts[r] elements, chunks in rank order, uneven
// sizes allowed), in P-1 passes along the ring (exchange.hpp's frames).
//
//   step s = 0 .. P-2, on rank R:
//     send    chunk[R-s-1]   -> successor     (reduced over s+1 ranks: R-s-1 .. R)
//     receive chunk[R-s-2]   <- predecessor   into scratch; reduce(chunk[R-s-2], scratch)
//
// With `produce`, each chunk is filled just in time: chunk[R-1] before step 0, chunk[R-s-2]
// while step s's transfers fly (at P = 1, chunk[0] alone).
//
// Invariant: after step s, chunk[R-s-2] holds s+2 ranks' contributions; after P-2,
// chunk[R] holds all P. Each chunk's reduction runs in one order on one rank, so an
// all-reduce built on it (all_reduce.hpp) gives every rank the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ring/collectives/exchange.hpp"

namespace ringattn::collectives {

// reduce(into, from): into = into (op) from, element-wise (sum, max) or over any structure
// the caller's chunks have (decode merges online-softmax rows); both the same length.
using Reduce = std::function<void(std::span<float> into, std::span<const float> from)>;
// produce(chunk): fills this rank's contribution to that chunk just before the ring needs
// it, while the step's transfers are in flight (decode computes its partials so).
using Produce = std::function<void(int chunk)>;
void sum(std::span<float> into, std::span<const float> from);
void max(std::span<float> into, std::span<const float> from);

// The ring passes themselves, for a collective made of them (all_reduce.hpp).
void reduce_scatter_ring(Exchange& x, Kind kind, std::uint64_t call, std::uint32_t first_step, std::span<float> data,
                         std::span<const std::size_t> counts, std::vector<float>& scratch, const Reduce& reduce,
                         const Produce& produce = {});

// counts.size() == world, their sum == data.size(), the same on every rank.
void check_counts(const net::Transport& t, const char* what, std::span<float> data, std::span<const std::size_t> counts);

class ReduceScatter {
 public:
  ReduceScatter(net::Transport& t, std::uint64_t max_frame, ring::Family family = ring::Family::collective)
      : x_(t, max_frame, family) {}
  // After it: data's chunk of this rank holds the reduction; the other chunks hold
  // partial reductions (scratch). Throws InvalidArgument for counts that do not fit data,
  // NetworkError (the ring failed) otherwise.
  ExchangeStats run(std::span<float> data, std::span<const std::size_t> counts, const Reduce& reduce = sum,
                    const Produce& produce = {});

 private:
  Exchange x_;
  std::uint64_t calls_ = 0;
  std::vector<float> scratch_;
};

}  // namespace ringattn::collectives
