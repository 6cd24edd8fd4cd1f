// Liveness: what "the peer is still there" means, so that a deadline measures silence,
// not work.
//
// Every rank keeps a progress counter and a state (idle, busy computing, waiting on the
// network). Whoever does work ticks the counter: the kernel once per tile (through
// counter()), the transport once per frame it moves. The I/O thread sends the counter and
// state in a PING on every link that has been quiet for a while, in both directions, so
// a process whose I/O thread runs is heard at least every keep-alive interval even while
// its kernel computes for minutes.
//
// A rank waiting on a peer fails only when, for the whole timeout,
//   - nothing at all arrived from the peer (silent: stopped, crashed host, dead network), or
//   - no progress is known in the peer's chain (stalled: alive but stuck, or not inside
//     the call).
// A PING says how old the freshest progress its sender knows of is: its own (its counter
// moved) or, while it waits, that of the peer it waits on ("progress by proxy"), carried
// forward as a point in time, never as a new tick. So a chain of ranks waiting behind one
// slow kernel stays alive, while in a cycle of ranks that only wait on each other the
// freshest progress can only age (each hop makes it older), and the cycle stalls and fails
// within the timeout, whatever frames moved before it closed.
inline std::int64_t steady_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "net/wire.hpp"

namespace ringattn::net {

class Liveness {
 public:
  // The counter the kernel ticks (one relaxed increment per tile or chunk).
  std::atomic<std::uint64_t>& counter() noexcept { return progress_; }
  void tick() noexcept { progress_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t progress() const noexcept { return progress_.load(std::memory_order_relaxed); }

  // A waiter: the peer it waits on knows of progress at `ns` (steady clock, this host).
  void forward(std::int64_t ns) noexcept {
    std::int64_t f = fresh_ns_.load(std::memory_order_relaxed);
    while (ns > f && !fresh_ns_.compare_exchange_weak(f, ns, std::memory_order_relaxed)) {
    }
  }

  // What a PING says now. A counter that moved since the last snapshot is progress now.
  PingInfo snapshot() noexcept {
    const std::uint64_t p = progress_.load(std::memory_order_relaxed);
    const std::int64_t now = steady_now_ns();
    if (seen_.exchange(p, std::memory_order_relaxed) != p) forward(now);
    const std::int64_t age_ms = std::max<std::int64_t>(0, now - fresh_ns_.load(std::memory_order_relaxed)) / 1000000;
    return {p, static_cast<PeerState>(state_.load(std::memory_order_relaxed)), leaving_.load(std::memory_order_relaxed),
            static_cast<std::uint32_t>(std::min<std::int64_t>(age_ms, 0xFFFFFFFF))};
  }

  // This rank asks to leave (a drain); every later PING says so. Never cleared: a
  // transport lives for one ring.
  void set_leaving() noexcept { leaving_.store(true, std::memory_order_relaxed); }

  // Marks this rank as being in `state` until the scope ends, then restores the state
  // it had before (scopes nest: busy around a fold, waiting inside a wait).
  class Scope {
   public:
    Scope(Liveness& l, PeerState s) noexcept : l_(&l), prev_(l.state_.exchange(static_cast<std::uint8_t>(s))) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { l_->state_.store(prev_); }

   private:
    Liveness* l_;
    std::uint8_t prev_;
  };
  [[nodiscard]] Scope enter(PeerState s) noexcept { return Scope(*this, s); }

 private:
  std::atomic<std::uint64_t> progress_{0};
  std::atomic<std::uint64_t> seen_{0};                // the counter at the last snapshot
  std::atomic<std::int64_t> fresh_ns_{steady_now_ns()};  // the freshest progress known
  std::atomic<std::uint8_t> state_{static_cast<std::uint8_t>(PeerState::idle)};
  std::atomic<bool> leaving_{false};
};

// What one link has heard from its peer, written by the I/O thread, read by waiters.
struct PeerLiveness {
  using Clock = std::chrono::steady_clock;

  std::atomic<std::int64_t> heard_ns{now_ns()};     // last byte of any frame from the peer
  std::atomic<std::int64_t> advanced_ns{now_ns()};  // the freshest progress in the peer's chain: data arrived,
                                                   // or its PING's age
  std::atomic<std::uint64_t> progress{0};
  std::atomic<std::uint8_t> state{static_cast<std::uint8_t>(PeerState::idle)};
  std::atomic<bool> leaving{false};  // its last PING asked to leave

  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  }
  void heard() noexcept { heard_ns.store(now_ns(), std::memory_order_relaxed); }
  void advanced() noexcept {
    const auto t = now_ns();
    heard_ns.store(t, std::memory_order_relaxed);
    advanced_ns.store(t, std::memory_order_relaxed);
  }
  void ping(const PingInfo& p) noexcept {
    const auto t = now_ns();
    heard_ns.store(t, std::memory_order_relaxed);
    state.store(static_cast<std::uint8_t>(p.state), std::memory_order_relaxed);
    if (p.leaving) leaving.store(true, std::memory_order_relaxed);
    progress.store(p.progress, std::memory_order_relaxed);
    const std::int64_t fresh = t - static_cast<std::int64_t>(p.age_ms) * 1000000;  // older by the transit: never fresher
    std::int64_t a = advanced_ns.load(std::memory_order_relaxed);
    while (fresh > a && !advanced_ns.compare_exchange_weak(a, fresh, std::memory_order_relaxed)) {
    }
  }
  PeerState peer_state() const noexcept { return static_cast<PeerState>(state.load(std::memory_order_relaxed)); }
};

}  // namespace ringattn::net
