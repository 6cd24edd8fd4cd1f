// The ring reduce-scatter of an fp32 array (ring/collectives/reduce_scatter.hpp) alone, on
// rings of 1-4 thread ranks: rank r's chunk holds the sum (within fp32 rounding of float64)
// or the max (exactly) over every rank, for uneven chunk counts (empty chunks, several
// frames a chunk); counts that do not fit the array are refused before anything is sent; a
// peer that dies mid-collective fails every other rank naming it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ring/collectives/reduce_scatter.hpp"
#include "tests/ring/collectives/collective_ranks.hpp"

using namespace ringattn;
using namespace ringattn::collectives;
using test::RankRing;

namespace {

std::vector<std::size_t> uneven(int world) {
  std::vector<std::size_t> c;
  for (int r = 0; r < world; ++r) c.push_back(r == 1 ? 0 : static_cast<std::size_t>(1500 * r + 3));
  return c;
}

}  // namespace

TEST_CASE("reduce-scatter: each rank's chunk reduced over every rank at P = 1-4, uneven and empty chunks") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    const std::vector<std::size_t> counts = uneven(world);
    const std::size_t n = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    std::vector<std::vector<float>> sums(static_cast<std::size_t>(world)), maxes(sums.size());
    const auto errors = test::on_ring(world, [&](RankRing& rr) {
      ReduceScatter rs(rr.transport, test::kSmallFrame);
      auto& s = sums[static_cast<std::size_t>(rr.rank)];
      s = test::values(rr.rank, n, 3);
      rs.run(s, counts);
      auto& m = maxes[static_cast<std::size_t>(rr.rank)];
      m = test::values(rr.rank, n, 4);
      rs.run(m, counts, collectives::max);
    });
    for (const auto& e : errors) CHECK(e == "");
    double worst = 0;
    bool max_exact = true;
    std::size_t at = 0;
    for (int r = 0; r < world; ++r) {
      for (std::size_t i = at; i < at + counts[static_cast<std::size_t>(r)]; ++i) {
        double want = 0;
        float want_max = -2;
        for (int q = 0; q < world; ++q) {
          want += test::values(q, n, 3)[i];
          want_max = std::max(want_max, test::values(q, n, 4)[i]);
        }
        worst = std::max(worst, std::abs(sums[static_cast<std::size_t>(r)][i] - want));
        max_exact = max_exact && maxes[static_cast<std::size_t>(r)][i] == want_max;
      }
      at += counts[static_cast<std::size_t>(r)];
    }
    CHECK(worst <= 1e-6 * world);
    CHECK(max_exact);
  }
}

TEST_CASE("reduce-scatter: a structured reduce, each chunk produced just in time while the transfers fly") {
  // Chunks of (value, count) pairs merged as running means: not element-wise, as decode's
  // online-softmax rows are not. Each rank's contribution is produced only when asked for,
  // every chunk once, its own last (at P = 1, the only one).
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    std::vector<std::size_t> counts;
    for (int r = 0; r < world; ++r) counts.push_back(2 * static_cast<std::size_t>(r == 1 ? 0 : 40 * r + 3));
    const std::size_t n = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    std::vector<std::vector<float>> out(static_cast<std::size_t>(world));
    std::vector<std::vector<int>> produced(static_cast<std::size_t>(world));
    const auto errors = test::on_ring(world, [&](RankRing& rr) {
      ReduceScatter rs(rr.transport, test::kSmallFrame);
      auto& data = out[static_cast<std::size_t>(rr.rank)];
      data.assign(n, std::nanf(""));  // nothing but produce() may fill it
      std::vector<std::size_t> start(counts.size() + 1, 0);
      std::partial_sum(counts.begin(), counts.end(), start.begin() + 1);
      auto mean_merge = [](std::span<float> into, std::span<const float> from) {
        for (std::size_t i = 0; i < into.size(); i += 2) {
          const float c = into[i + 1] + from[i + 1];
          into[i] = (into[i] * into[i + 1] + from[i] * from[i + 1]) / c;
          into[i + 1] = c;
        }
      };
      rs.run(data, counts, mean_merge, [&](int chunk) {
        produced[static_cast<std::size_t>(rr.rank)].push_back(chunk);
        for (std::size_t i = start[static_cast<std::size_t>(chunk)]; i < start[static_cast<std::size_t>(chunk) + 1]; i += 2) {
          data[i] = static_cast<float>(rr.rank + 1) * static_cast<float>(i);
          data[i + 1] = static_cast<float>(rr.rank + 1);
        }
      });
    });
    for (const auto& e : errors) CHECK(e == "");
    std::size_t at = 0;
    for (int r = 0; r < world; ++r) {
      auto p = produced[static_cast<std::size_t>(r)];
      CHECK(p.size() == static_cast<std::size_t>(world));
      CHECK(p.back() == r);
      std::sort(p.begin(), p.end());
      for (int c = 0; c < world; ++c) CHECK(p[static_cast<std::size_t>(c)] == c);
      // weighted mean of (q+1) i with weights (q+1): i * sum (q+1)^2 / sum (q+1)
      double w2 = 0, w = 0;
      for (int q = 1; q <= world; ++q) w2 += q * q, w += q;
      double worst = 0;
      for (std::size_t i = at; i < at + counts[static_cast<std::size_t>(r)]; i += 2) {
        worst = std::max(worst, std::abs(out[static_cast<std::size_t>(r)][i] - static_cast<double>(i) * w2 / w) /
                                    std::max(1.0, static_cast<double>(i)));
        CHECK(out[static_cast<std::size_t>(r)][i + 1] == static_cast<float>(w));
      }
      CHECK(worst <= 1e-6);
      at += counts[static_cast<std::size_t>(r)];
    }
  }
}

TEST_CASE("reduce-scatter: chunk counts that do not fit the array are refused before anything is sent") {
  const auto errors = test::on_ring(1, [&](RankRing& rr) {
    ReduceScatter rs(rr.transport, test::kSmallFrame);
    std::vector<float> v(10);
    const std::vector<std::size_t> two = {5, 5}, short_one = {9}, huge = {SIZE_MAX};
    CHECK_THROWS_WITH_AS(rs.run(v, two), doctest::Contains("2 chunk counts in a ring of 1"), InvalidArgument);
    CHECK_THROWS_WITH_AS(rs.run(v, short_one), doctest::Contains("add up to 9, not the 10 elements"), InvalidArgument);
    CHECK_THROWS_WITH_AS(rs.run(v, huge), doctest::Contains("add up to more than the 10 elements"), InvalidArgument);
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("reduce-scatter: a peer that dies on entering, or after its first step, fails the ranks that need it, naming it") {
  for (const int world : {2, 3, 4})
    for (const bool first_step : {false, true}) {
      if (first_step && world == 2) continue;  // one step is the whole reduce-scatter
      CAPTURE(world);
      CAPTURE(first_step);
      const int dying = 0;
      const std::vector<std::size_t> counts(static_cast<std::size_t>(world), 3000);
      const std::size_t n = 3000 * static_cast<std::size_t>(world);
      const auto seen = test::with_dying_rank(
          world, dying,
          [&](RankRing& rr) {  // step 0 as ReduceScatter::run makes it
            if (!first_step) return;
            Exchange x(rr.transport, test::kSmallFrame);
            std::vector<float> out(3000), in(3000);
            x.send(rr.transport.successor(), {Kind::reduce_scatter, 1, 0}, std::as_bytes(std::span(out)));
            x.receive(rr.transport.predecessor(), {Kind::reduce_scatter, 1, 0}, std::as_writable_bytes(std::span(in)));
            x.wait();
          },
          [&](RankRing& rr) {
            std::vector<float> v(n, 1.0f);
            ReduceScatter(rr.transport, test::kSmallFrame).run(v, counts);
          });
      test::check_survivors(seen, dying, !first_step);
    }
}
