// Ring::inject_fault (include/ringattn/ring.hpp): the misbehaviours of a failing rank,
// played through the ring step's hook so that the ring's real paths (liveness, CRC,
// deadlines, fault attribution) meet them exactly as they would meet a real failure.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "ring/internals.hpp"
#include "ringattn/error.hpp"
#include "ringattn/ring.hpp"

namespace ringattn {

void Ring::inject_fault(Fault fault, int step, double slow_seconds) {
  const int first = fault == Fault::corrupt ? 1 : 0;  // step 0 sends this rank's own block
  if (step < first || step >= world_size())
    throw InvalidArgument("Ring::inject_fault: step = " + std::to_string(step) + " must be in " +
                          std::to_string(first) + ".." + std::to_string(world_size() - 1));
  if (!(slow_seconds >= 0)) throw InvalidArgument("Ring::inject_fault: slow_seconds must be >= 0");
  RingInternals::set_step_hook(*this, [fault, step, slow_seconds](int at, std::span<std::byte> block,
                                                                  std::atomic<std::uint64_t>& progress) {
    if (at != step) return;
    switch (fault) {
      case Fault::exit:
        std::fprintf(stderr, "fault injected: exiting abruptly at step %d\n", at);
        ::_exit(17);
      case Fault::hang:  // busy (the hook runs inside the call's busy scope), no progress
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      case Fault::slow: {  // a slow kernel that keeps ticking, as the real one does per tile
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(slow_seconds);
        while (std::chrono::steady_clock::now() < end) {
          progress.fetch_add(1, std::memory_order_relaxed);
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return;
      }
      case Fault::corrupt:  // the block keeps the CRC it arrived with: the successor sees a bad CRC
        if (block.size() > 64) block[block.size() - 1 - (block.size() - 64) / 2] ^= std::byte{0x5a};
        return;
    }
  });
}

}  // namespace ringattn
