// ringattn — what the library's own programs (the CLI's node, the benchmarks) may do
// with a Ring that an embedding job cannot: see the ring's limits as they go on the
// wire (so a launcher can fingerprint a rank's job), and inject faults for the
// multi-process tests (src/node/fault.hpp).
#pragma once

#include <functional>
#include <span>

#include "net/transport.hpp"
#include "net/wire.hpp"
#include "ringattn/ring.hpp"

namespace ringattn {

struct RingInternals {
  // The limits a Ring connected with `o` agrees on in its HELLO (throws InvalidArgument
  // for bad limits).
  static net::LinkLimits link_limits(const RingOptions& o);

  // Called at the start of every ring step of every call with the step number, the
  // block about to be sent and folded, and the transport's progress counter. Tests only.
  // The ring's transport, for a schedule of the library's own (bench overlap drives
  // RingStep on it) — the same links, rendezvous and liveness as forward()'s.
  static net::Transport& transport(Ring& ring);

  // The transport's progress counter (what keep-alives carry) and traffic so far.
  static std::uint64_t progress(const Ring& ring);
  static net::TransportStats transport_stats(const Ring& ring);
  // The kernel path a call of `spec` runs on.
  static Isa isa(Ring& ring, const AttentionSpec& spec);

  using StepHook = std::function<void(int step, std::span<std::byte> block, std::atomic<std::uint64_t>& progress)>;
  static void set_step_hook(Ring& ring, StepHook hook);
};

}  // namespace ringattn
