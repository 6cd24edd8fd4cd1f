// ringattn — the ring all-reduce of an fp32 array: every rank ends with the reduction over
// every rank's array, the same bits on every rank. A ring reduce-scatter (reduce_scatter.hpp:
// chunk r reduced on rank r) then a ring all-gather of the reduced chunks (all_gather.hpp):
// 2(P-1) passes of about N/P elements each, so each rank sends 2(P-1)/P of the array
// whatever P is. Chunks split the array evenly (the first N mod P one element longer);
// every rank passes the same length, or the ring fails at the first frame.
//
//   steps 0 .. P-2:      reduce-scatter (frames of this all-reduce's call)
//   steps P-1 .. 2P-3:   all-gather of chunk r from rank r
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ring/collectives/exchange.hpp"
#include "ring/collectives/reduce_scatter.hpp"

namespace ringattn::collectives {

// The even split all_reduce uses: counts[r] = N / P, plus one for r < N mod P.
std::vector<std::size_t> even_counts(std::size_t n, int world);

class AllReduce {
 public:
  AllReduce(net::Transport& t, std::uint64_t max_frame, ring::Family family = ring::Family::collective)
      : x_(t, max_frame, family) {}
  // In place. Throws NetworkError (the ring failed) when a peer fails or disagrees.
  ExchangeStats run(std::span<float> data, Reduce reduce = sum);

 private:
  Exchange x_;
  std::uint64_t calls_ = 0;
  std::vector<float> scratch_;
  std::vector<std::size_t> counts_;
  std::vector<std::span<std::byte>> chunks_;
};

}  // namespace ringattn::collectives
