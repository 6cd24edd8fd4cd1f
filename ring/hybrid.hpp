// ringattn — the hybrid schedule (USP's): Ulysses inside each group of a mesh, the ring
// across the groups. Ring::forward_hybrid (ring/hybrid.cpp).
//
// The mesh: world = groups x group_size (RingOptions::group_size), group g = ranks
// [g G, (g+1) G); the ranks that hold place i in every group (i, i + G, i + 2G, ...) form a
// ring across the groups. A pair of ranks shares a group or a ring across, never both, so
// their frames never meet on a link.
//
//   1-3. Ulysses' plan and head split inside the group (ulysses.hpp): each rank of the group
//        holds the group's whole shard (its rows sorted by position) for heads/G query heads
//   4.   the ring across the groups on those heads: the group's K/V for them go around the
//        C = world/G groups, each visiting block folded into the online-softmax state
//        while the next travels (rotation.hpp, ring_step.hpp)
//   5.   O and lse back to the rows' ranks inside the group (ulysses.hpp)
//
// The backward (Ring::backward_hybrid) moves q, k, v, dO, lse and D = rowsum(dO o O) to the
// head split in step 3, runs the backward rotation across the groups in step 4 (each
// block's dK/dV accumulators one hop behind it: backward_rotation.hpp), and brings dQ, dK,
// dV back in step 5 (a replicated K/V head's shares summed, as Ulysses' are).
//
// Traffic per rank: the group's all-to-alls (Ulysses at P = G) plus (C-1) K/V blocks of the
// group's rows on its heads: the ring's volume divided by G, on links no busier than the
// ring's. Needs heads divisible by G (with Ulysses' GQA condition at P = G) and a group's
// rows within limits().max_rows (a block across holds them all).
#pragma once

#include <cstdint>
#include <vector>

#include "ring/gradient_relay.hpp"
#include "ring/mesh.hpp"
#include "ring/ring_step.hpp"
#include "ring/ulysses.hpp"

namespace ringattn::ring {

// On the mesh's views (mesh.hpp): Ulysses over the group, the ring step and gradient relay
// across the groups.
struct HybridState {
  HybridState(Mesh& mesh, std::uint64_t max_frame, std::uint32_t max_rows)
      : u(mesh.group, max_frame), step(mesh.step(Scope::across, max_rows)), grads(mesh.relay(Scope::across)) {}
  UlyssesState u;
  RingStep& step;                     // the mesh's, across
  GradientRelay& grads;               // backward: the blocks' dK/dV one hop behind them, across
  std::vector<float> acc_k, acc_v;    // backward: the pooled pair (backward_rotation.hpp)
};

}  // namespace ringattn::ring
