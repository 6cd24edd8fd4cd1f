// ringattn — test hooks and the library's own schedules, not public API: the limits as
// they go on the wire (for the launcher's rendezvous server), the fault hook of the
// multi-process tests (src/node/fault.hpp), and the transport the overlap benchmark
// drives the ring step on. Everything else a program needs is public (ringattn/ring.hpp).
#pragma once

#include <functional>
#include <span>
#include <string>

#include "net/transport.hpp"
#include "net/wire.hpp"
#include "ringattn/ring.hpp"

namespace ringattn {

struct RingInternals {
  // The limits a Ring connected with `o` agrees on in its HELLO (throws InvalidArgument
  // for bad limits).
  static net::LinkLimits link_limits(const RingOptions& o);

  // The ring's transport, for a schedule of the library's own (the public step probe,
  // ringattn/step_probe.hpp, drives RingStep on it) — the same links, rendezvous and
  // liveness as forward()'s.
  static net::Transport& transport(Ring& ring);
  // The largest payload one frame on that transport may carry (the negotiated maximum):
  // what a collective (ring/collectives/) splits larger payloads by.
  static std::uint64_t max_frame_bytes(const Ring& ring);
  // The most rows one block of this ring may have (RingLimits::max_rows).
  static std::uint32_t max_block_rows(const Ring& ring);
  // The ring's limits check of a call of `rows` rows and this spec (what forward() checks
  // first): InvalidArgument "<who><what exceeds which limit>" before anything is sized or sent.
  static void check_limits(const Ring& ring, const AttentionSpec& spec, std::int64_t rows, const std::string& who);

  // Called at the start of every ring step of every call with the step number, the
  // block about to be sent and folded (it may change it: fp32 K and V are then copied,
  // not sent from the caller's arrays), and the transport's progress counter. Tests only.
  using StepHook = std::function<void(int step, std::span<std::byte> block, std::atomic<std::uint64_t>& progress)>;
  static void set_step_hook(Ring& ring, StepHook hook);
};

}  // namespace ringattn
