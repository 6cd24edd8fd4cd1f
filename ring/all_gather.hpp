// ringattn — the ring all-gather: every rank's block reaches every rank in P-1 ring passes.
//
//   step s = 0 .. P-2, on rank R:
//     send    blocks[R-s]     -> successor   (its own at s = 0, then the block that came
//                                            in at step s-1, relayed with its CRC)
//     receive blocks[R-s-1]   <- predecessor
//     check(step, origin, header, block) before the block is relayed or read
//
// Invariant: after step s, rank R holds the blocks of origins R, R-1, ..., R-s-1 (mod P);
// after P-2 every origin's. Nothing is overlapped with the passes: decode gathers all
// tokens first, because every rank's cache answers every token. Decode's queries travel
// this way (decode.cpp); the K/V rotation of forward is the same pass with two buffers
// and the fold overlapped (ring_step.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "ring/ring_pass.hpp"

namespace ringattn::ring {

struct PassStats {
  std::uint64_t bytes_sent = 0;
  double wait_seconds = 0;
};

inline int ring_mod(int a, int p) { return ((a % p) + p) % p; }

// tag_for(step) -> the tag of the frames of that step (sent and received);
// check(step, origin, header, block) throws (failing the ring) for a block that is not
// what this call expects. blocks.size() is the world size; blocks[R] is this rank's.
template <class TagFor, class Check>
PassStats all_gather(RingPass& pass, std::vector<std::vector<std::byte>>& blocks, TagFor&& tag_for, Check&& check) {
  using Clock = std::chrono::steady_clock;
  const int R = pass.transport().rank(), P = pass.transport().world();
  PassStats st;
  std::optional<std::uint32_t> crc;  // of the block to relay; the own block's is computed
  for (int s = 0; s + 1 < P; ++s) {
    const int send_origin = ring_mod(R - s, P), recv_origin = ring_mod(R - s - 1, P);
    const auto& out = blocks[static_cast<std::size_t>(send_origin)];
    auto& in = blocks[static_cast<std::size_t>(recv_origin)];
    pass.post(tag_for(s), std::span<const std::byte>(out), crc, in);
    st.bytes_sent += out.size();
    const auto t0 = Clock::now();
    const net::FrameHeader got = pass.finish();
    st.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    check(s, recv_origin, got, in);
    in.resize(static_cast<std::size_t>(got.payload_bytes));
    crc = got.payload_crc;
  }
  return st;
}

}  // namespace ringattn::ring
