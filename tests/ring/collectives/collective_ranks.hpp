// The collectives' tests' harness: rings of 1-4 ranks as threads of this process on
// loopback (tests/ring/ranks_as_threads.hpp), each collective on the ring's own transport
// (RingInternals::transport), its frames at most `max_frame` bytes so that a block of a
// few KiB already travels as several pieces.
#pragma once

#include <doctest/doctest.h>

#include <barrier>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ring/internals.hpp"
#include "ringattn/ring.hpp"
#include "tests/free_port.hpp"
#include "tests/ring/ranks_as_threads.hpp"

namespace ringattn::test {

inline constexpr std::uint64_t kSmallFrame = 4096;

struct RankRing {
  int rank, world;
  Ring& ring;
  net::Transport& transport;
};

// fn(rank ring) on every rank of a ring of `world`; each rank's error ("" if none).
// Links between every pair (RingOptions::all_pairs): what the all-to-all asks for. fn runs
// once every rank has connected (a rank whose connect fails drops out of that wait).
inline std::vector<std::string> on_ring(int world, const std::function<void(RankRing&)>& fn, double timeout = 20) {
  const std::string master = "127.0.0.1:" + std::to_string(free_port());
  std::barrier<> formed(world);
  return on_ranks(world, [&](int r) {
    RingOptions o = options(r, world, master, timeout);
    o.all_pairs = true;
    std::optional<Ring> ring;
    try {
      ring.emplace(Ring::connect(o));
    } catch (...) {
      formed.arrive_and_drop();
      throw;
    }
    formed.arrive_and_wait();
    RankRing rr{r, world, *ring, RingInternals::transport(*ring)};
    fn(rr);
  });
}

// A peer that dies mid-collective: `dying` does `first` (nothing, or the collective's first
// steps by hand) then closes its ring as a crashing process's sockets close; every other
// rank runs `survive`, within a ring timeout of 5 s. Returns what each survivor saw: its
// NetworkError's text, or "(no error)" ("" for the dying rank).
inline std::vector<std::string> with_dying_rank(int world, int dying, const std::function<void(RankRing&)>& first,
                                                const std::function<void(RankRing&)>& survive) {
  std::vector<std::string> seen(static_cast<std::size_t>(world));
  const auto errors = on_ring(
      world,
      [&](RankRing& rr) {
        if (rr.rank == dying) {
          first(rr);
          rr.ring.close();
          return;
        }
        try {
          survive(rr);
          seen[static_cast<std::size_t>(rr.rank)] = "(no error)";
        } catch (const NetworkError& e) {
          seen[static_cast<std::size_t>(rr.rank)] = e.what();
        }
      },
      5);
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) seen[r] = "(another error) " + errors[r];
  return seen;
}

// The survivors of with_dying_rank. A death before the dying rank sent anything (`strict`):
// every survivor needed its data, and failed naming it. A death after some steps: each
// survivor failed naming it, or had its own part done before (its results were whole: the
// failure reaches it at its next call), and at least one failed.
inline void check_survivors(const std::vector<std::string>& seen, int dying, bool strict) {
  int failed = 0;
  for (std::size_t r = 0; r < seen.size(); ++r) {
    if (static_cast<int>(r) == dying) continue;
    CAPTURE(r);
    const bool named = seen[r].find("rank " + std::to_string(dying)) != std::string::npos;
    CHECK_MESSAGE((named || (!strict && seen[r] == "(no error)")), seen[r]);
    failed += named;
  }
  CHECK(failed >= 1);
}

// Deterministic values for rank r's element i of a run with `seed`.
inline std::vector<float> values(int rank, std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed * 7919u + static_cast<std::uint32_t>(rank));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace ringattn::test
