// ringattn — the ring pass: the one way a block moves one hop around the ring. Every
// schedule that passes blocks along the ring is built on it.
//
//   post(tag, out, crc, in)      send `out` -> successor as one frame of `tag` (this call,
//                                this step); receive the predecessor's frame of the same
//                                tag (or of `from`'s) into `in`, sized when its header
//                                arrives (within the ring's limits; `in` only grows, so a
//                                run of calls of one shape allocates nothing after the first)
//   ... the caller's work ...    -- overlaps both transfers
//   finish()                     wait both; returns the received header, which the caller
//                                checks before anything reads `in`
//
// A block that arrived from the predecessor and is passed on keeps the CRC it arrived
// with (`crc`), so each block's CRC is computed once, by its owner. What the pass does not
// know: whose block comes at which step and what a valid block is — the schedule says.
//
// Schedules on it: forward's K/V rotation (ring_step.hpp: two buffers swapped after each
// of P-1 passes, the fold overlapped) and decode's query all-gather (all_gather.hpp: one
// buffer per origin, P-1 passes, each relaying the block that came in the pass before).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "net/transport.hpp"

namespace ringattn::ring {

class RingPass {
 public:
  explicit RingPass(net::Transport& transport) : t_(transport) {}

  void post(const net::Tag& tag, net::Payload out, std::optional<std::uint32_t> crc, std::vector<std::byte>& in) {
    post(tag, std::move(out), crc, tag, in);
  }
  // The received frame's tag differs from the sent one's (a relay a step behind).
  void post(const net::Tag& to, net::Payload out, std::optional<std::uint32_t> crc, const net::Tag& from,
            std::vector<std::byte>& in);
  net::FrameHeader finish();
  // True while the send of the last post() may still read its payload.
  bool sending() const { return send_.valid() && !t_.test(send_); }

  net::Transport& transport() const { return t_; }

 private:
  net::Transport& t_;
  net::Request send_, recv_;
};

}  // namespace ringattn::ring
