// ringattn — the all-to-all of opaque blocks: rank r's send[j] becomes rank j's recv[r],
// for every pair (Ulysses' exchange of heads for tokens, and back). Direct links between
// every pair (the transport dials a non-neighbour on the first frame to it); every
// transfer posted at once and waited together:
//
//   s = 1 .. P-1, on rank R:  send send[R+s] -> rank R+s;  receive recv[R-s] <- rank R-s
//   send[R] is copied into recv[R]
//
// Blocks may differ in size per pair; recv[j].size() must be what rank j sends this rank,
// or the ring fails at that frame naming both ranks (exchange.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "ring/collectives/exchange.hpp"

namespace ringattn::collectives {

class AllToAll {
 public:
  AllToAll(net::Transport& t, std::uint64_t max_frame, ring::Family family = ring::Family::collective)
      : x_(t, max_frame, family) {}
  // send.size() == recv.size() == world; send[rank].size() == recv[rank].size().
  // Throws InvalidArgument for those, NetworkError (the ring failed) otherwise.
  ExchangeStats run(std::span<const std::span<const std::byte>> send, std::span<const std::span<std::byte>> recv);

 private:
  Exchange x_;
  std::uint64_t calls_ = 0;
};

}  // namespace ringattn::collectives
