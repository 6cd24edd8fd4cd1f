// ringattn — the ring all-gather of opaque blocks: every rank's bytes reach every rank in
// P-1 passes along the ring (exchange.hpp's frames).
//
//   step s = 0 .. P-2, on rank R:
//     send    blocks[R-s]    -> successor     (its own at s = 0, then the one that came at s-1)
//     receive blocks[R-s-1]  <- predecessor   (exactly blocks[R-s-1].size() bytes)
//
// Invariant: after step s, rank R holds the blocks of R, R-1, ..., R-s-1 (mod P). Blocks
// may differ in size (uneven shards); every rank passes the same sizes, and a rank whose
// sizes differ is refused at the first frame (exchange.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ring/collectives/exchange.hpp"

namespace ringattn::collectives {

// The ring passes themselves, for a collective made of them (all_reduce.hpp): frames of
// `kind`, call `call`, steps from `first_step`.
void gather_ring(Exchange& x, Kind kind, std::uint64_t call, std::uint32_t first_step,
                 std::span<const std::span<std::byte>> blocks);

// arrived(step, origin): a block that came, before it is relayed or read (it may throw,
// failing the ring, for a block that is not what the caller expects).
using Arrived = std::function<void(int step, int origin)>;

class AllGather {
 public:
  AllGather(net::Transport& t, std::uint64_t max_frame, ring::Family family = ring::Family::collective)
      : x_(t, max_frame, family) {}
  // blocks.size() == world; blocks[rank] holds this rank's bytes, the others are filled.
  // Throws InvalidArgument for a wrong count, NetworkError (the ring failed) otherwise.
  ExchangeStats run(std::span<const std::span<std::byte>> blocks);
  // The same when a rank does not know the other blocks' sizes: each is sized as it
  // arrives (one frame each: at most the ring's negotiated maximum), and checked by
  // `arrived` before it goes on.
  ExchangeStats run_sized(std::span<std::vector<std::byte>> blocks, const Arrived& arrived);

 private:
  Exchange x_;
  std::uint64_t calls_ = 0;
};

}  // namespace ringattn::collectives
