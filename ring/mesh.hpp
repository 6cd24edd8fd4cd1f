// ringattn — a ring's mesh (RingOptions::group_size): its groups of G consecutive ranks and
// the rings across them, each a transport of its own (net::GroupTransport) on the ring's
// links, and the scoped collectives the ring offers on them (Ring::all_reduce,
// Ring::all_gather with a Scope).
//
//   P = 8, G = 4:   place in the group:   0    1    2    3
//                   group 0              r0 - r1 - r2 - r3
//                   group 1              r4 - r5 - r6 - r7
//                   across               r0|r4, r1|r5, r2|r6, r3|r7
//
// A pair of ranks shares a group or a ring across, never both, so their frames never meet
// on a link; every link is opened when the ring connects.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "net/group_transport.hpp"
#include "ring/gradient_relay.hpp"
#include "ring/ring_step.hpp"
#include "ring/collectives/all_gather.hpp"
#include "ring/collectives/all_reduce.hpp"
#include "ringattn/ring.hpp"

namespace ringattn::ring {

std::vector<int> group_members(int rank, int world, int group_size);   // this rank's group
std::vector<int> across_members(int rank, int world, int group_size);  // its ring across the groups

struct Mesh {
  Mesh(net::Transport& ring, int group_size)
      : ring(ring),
        group(ring, group_members(ring.rank(), ring.world(), group_size)),
        across(ring, across_members(ring.rank(), ring.world(), group_size)) {}
  net::Transport& ring;
  net::GroupTransport group, across;
  net::Transport& of(Scope s) { return s == Scope::group ? group : s == Scope::across ? across : ring; }

  // A program's collectives in each scope, made on first use.
  struct Collectives {
    Collectives(net::Transport& t, std::uint64_t max_frame) : reduce(t, max_frame), gather(t, max_frame) {}
    collectives::AllReduce reduce;
    collectives::AllGather gather;
  };
  std::array<std::unique_ptr<Collectives>, 3> scoped;

  // The K/V rotation inside a group or across the groups (forward, backward and decode in a group or across scope, the
  // hybrid schedule's ring across), made on first use; the ring's own is Ring::Impl's.
  RingStep& step(Scope s, std::uint32_t max_rows) {
    auto& slot = steps[static_cast<std::size_t>(s)];
    if (!slot) slot = std::make_unique<RingStep>(of(s), max_rows);
    return *slot;
  }
  GradientRelay& relay(Scope s) {
    auto& slot = relays[static_cast<std::size_t>(s)];
    if (!slot) slot = std::make_unique<GradientRelay>(of(s));
    return *slot;
  }
  std::array<std::unique_ptr<RingStep>, 3> steps;
  std::array<std::unique_ptr<GradientRelay>, 3> relays;
};

}  // namespace ringattn::ring
