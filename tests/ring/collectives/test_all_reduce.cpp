// The ring all-reduce (ring/collectives/all_reduce.hpp) alone, on rings of 1-4 thread ranks:
// sums within fp32 rounding of float64 and the same bits on every rank, max exactly, over
// lengths that do not divide by P (shorter than P, empty, several frames a chunk); a rank
// that passes another length is refused at the first frame on every rank; a peer that dies
// mid-collective fails every other rank naming it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ring/collectives/all_reduce.hpp"
#include "ring/collectives/all_gather.hpp"
#include "tests/ring/collectives/collective_ranks.hpp"

using namespace ringattn;
using namespace ringattn::collectives;
using test::RankRing;

TEST_CASE("all-reduce: sum and max at P = 1-4 over uneven lengths, every rank the same bits") {
  for (int world = 1; world <= 4; ++world) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1001}, std::size_t{5003}}) {
      CAPTURE(world);
      CAPTURE(n);
      std::vector<std::vector<float>> sums(static_cast<std::size_t>(world)), maxes(sums.size());
      const auto errors = test::on_ring(world, [&](RankRing& rr) {
        AllReduce ar(rr.transport, test::kSmallFrame);
        auto& s = sums[static_cast<std::size_t>(rr.rank)];
        s = test::values(rr.rank, n, 1);
        ar.run(s);
        auto& m = maxes[static_cast<std::size_t>(rr.rank)];
        m = test::values(rr.rank, n, 2);
        ar.run(m, collectives::max);
      });
      for (const auto& e : errors) CHECK(e == "");
      double worst = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double want = 0;
        float want_max = -2;
        for (int r = 0; r < world; ++r) {
          want += test::values(r, n, 1)[i];
          want_max = std::max(want_max, test::values(r, n, 2)[i]);
        }
        worst = std::max(worst, std::abs(sums[0][i] - want));
        CHECK(maxes[0][i] == want_max);
      }
      CHECK(worst <= 1e-6 * world);
      for (int r = 1; r < world; ++r) {
        CHECK(sums[static_cast<std::size_t>(r)] == sums[0]);
        CHECK(maxes[static_cast<std::size_t>(r)] == maxes[0]);
      }
    }
  }
}

TEST_CASE("all-reduce: a rank with another length fails every rank, naming what was expected and what came") {
  std::vector<std::string> seen(3);
  const auto errors = test::on_ring(
      3,
      [&](RankRing& rr) {
        AllReduce ar(rr.transport, test::kSmallFrame);
        std::vector<float> v(rr.rank == 1 ? 90 : 99, 1.0f);
        try {
          ar.run(v);
        } catch (const NetworkError& e) {
          seen[static_cast<std::size_t>(rr.rank)] = e.what();
        }
      },
      5);
  for (const auto& e : errors) CHECK(e == "");
  bool named = false;
  for (const auto& s : seen) {
    CHECK_FALSE(s.empty());
    // 99 floats are chunks of 132 bytes at P = 3, 90 of 120: whichever side refuses first
    named = named || (s.find("expected the all-reduce of call 1 step 0 piece 0") != std::string::npos &&
                      s.find("but got the all-reduce of call 1 step 0 piece 0") != std::string::npos &&
                      s.find("120 bytes") != std::string::npos && s.find("132 bytes") != std::string::npos);
  }
  CHECK_MESSAGE(named, seen[0] << " | " << seen[1] << " | " << seen[2]);
}

TEST_CASE("all-reduce: a peer that dies on entering, or after its first reduce step, fails the ranks that need it, naming it") {
  for (const int world : {2, 3, 4})
    for (const bool first_step : {false, true}) {
      CAPTURE(world);
      CAPTURE(first_step);
      const int dying = world - 1;
      const std::size_t n = 4000;
      const auto seen = test::with_dying_rank(
          world, dying,
          [&](RankRing& rr) {  // step 0 of the reduce-scatter, as AllReduce::run makes it, then gone
            if (!first_step) return;
            Exchange x(rr.transport, test::kSmallFrame);
            std::vector<float> data = test::values(rr.rank, n, 1), in(n);
            const auto counts = even_counts(n, world);
            std::vector<std::size_t> start(counts.size() + 1, 0);
            for (std::size_t c = 0; c < counts.size(); ++c) start[c + 1] = start[c] + counts[c];
            const auto out_c = static_cast<std::size_t>((rr.rank - 1 + world) % world);
            const auto in_c = static_cast<std::size_t>((rr.rank - 2 + 2 * world) % world);
            x.send(rr.transport.successor(), {Kind::all_reduce, 1, 0},
                   std::as_bytes(std::span(data).subspan(start[out_c], counts[out_c])));
            x.receive(rr.transport.predecessor(), {Kind::all_reduce, 1, 0},
                      std::as_writable_bytes(std::span(in).subspan(0, counts[in_c])));
            x.wait();
          },
          [&](RankRing& rr) {
            AllReduce ar(rr.transport, test::kSmallFrame);
            std::vector<float> v = test::values(rr.rank, n, 1);
            ar.run(v);
          });
      // Every rank needs every other's contribution to its result: all fail either way.
      test::check_survivors(seen, dying, true);
    }
}
