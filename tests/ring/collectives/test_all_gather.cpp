// The ring all-gather of opaque blocks (ring/collectives/all_gather.hpp) alone, on rings of
// 1-4 thread ranks: every rank ends with every rank's bytes, for blocks of uneven sizes
// (empty ones, several frames long); a rank that expects another size is refused at the
// first frame on every rank; a peer that dies mid-collective fails every other rank naming it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ring/collectives/all_gather.hpp"
#include "tests/ring/collectives/collective_ranks.hpp"

using namespace ringattn;
using namespace ringattn::collectives;
using test::RankRing;

namespace {

// Rank r's block in a run of `world`: its size and bytes, different for every rank.
std::size_t size_of(int r, int world) { return r == world - 1 && world > 2 ? 0 : static_cast<std::size_t>(3000 * r + 17); }

std::byte byte_of(int r, std::size_t i) { return static_cast<std::byte>((i * 31 + static_cast<std::size_t>(r) * 101 + 7) & 0xFF); }

}  // namespace

TEST_CASE("all-gather: every rank's block on every rank at P = 1-4, uneven sizes, empty blocks, several frames a block") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    std::vector<int> good(static_cast<std::size_t>(world), 0);
    const auto errors = test::on_ring(world, [&](RankRing& rr) {
      AllGather ag(rr.transport, test::kSmallFrame);
      for (int round = 0; round < 2; ++round) {  // twice: the call numbers move on together
        std::vector<std::vector<std::byte>> blocks(static_cast<std::size_t>(world));
        std::vector<std::span<std::byte>> spans;
        for (int r = 0; r < world; ++r) {
          auto& b = blocks[static_cast<std::size_t>(r)];
          b.assign(size_of(r, world), std::byte{0});
          if (r == rr.rank)
            for (std::size_t i = 0; i < b.size(); ++i) b[i] = byte_of(r, i);
          spans.emplace_back(b);
        }
        ag.run(spans);
        bool all = true;
        for (int r = 0; r < world; ++r)
          for (std::size_t i = 0; i < blocks[static_cast<std::size_t>(r)].size(); ++i)
            all = all && blocks[static_cast<std::size_t>(r)][i] == byte_of(r, i);
        good[static_cast<std::size_t>(rr.rank)] += all;
      }
    });
    for (const auto& e : errors) CHECK(e == "");
    for (const int g : good) CHECK(g == 2);
  }
}

TEST_CASE("all-gather sized on arrival: blocks of sizes no other rank knew, each checked before it is relayed") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    std::vector<int> good(static_cast<std::size_t>(world), 0);
    const auto errors = test::on_ring(world, [&](RankRing& rr) {
      AllGather ag(rr.transport, test::kSmallFrame);
      const auto own = static_cast<std::size_t>(rr.rank);
      for (int round = 0; round < 2; ++round) {
        // Stale contents of another size in the others' slots: resized to what comes.
        std::vector<std::vector<std::byte>> blocks(static_cast<std::size_t>(world), std::vector<std::byte>(9));
        blocks[own].resize(std::min<std::size_t>(size_of(rr.rank, world), test::kSmallFrame));
        for (std::size_t i = 0; i < blocks[own].size(); ++i) blocks[own][i] = byte_of(rr.rank, i);
        std::vector<int> order;
        ag.run_sized(blocks, [&](int step, int origin) {
          CHECK(origin == ((rr.rank - step - 1) % world + world) % world);
          order.push_back(origin);
        });
        bool all = static_cast<int>(order.size()) == world - 1;
        for (int r = 0; r < world; ++r) {
          const auto& b = blocks[static_cast<std::size_t>(r)];
          all = all && b.size() == std::min<std::size_t>(size_of(r, world), test::kSmallFrame);
          for (std::size_t i = 0; i < b.size(); ++i) all = all && b[i] == byte_of(r, i);
        }
        good[own] += all;
      }
      std::vector<std::vector<std::byte>> big(static_cast<std::size_t>(world));
      big[own].resize(test::kSmallFrame + 1);
      CHECK_THROWS_WITH_AS(ag.run_sized(big, [](int, int) {}), doctest::Contains("must fit one frame"), InvalidArgument);
    });
    for (const auto& e : errors) CHECK(e == "");
    for (const int g : good) CHECK(g == 2);
  }
}

TEST_CASE("all-gather: a rank that expects another size of a block fails the ring, naming both") {
  std::vector<std::string> seen(3);
  const auto errors = test::on_ring(
      3,
      [&](RankRing& rr) {
        AllGather ag(rr.transport, test::kSmallFrame);
        std::vector<std::vector<std::byte>> blocks = {std::vector<std::byte>(40), std::vector<std::byte>(50),
                                                      std::vector<std::byte>(60)};
        if (rr.rank == 1) blocks[0].resize(41);  // rank 1 thinks rank 0's block is longer
        std::vector<std::span<std::byte>> spans(blocks.begin(), blocks.end());
        try {
          ag.run(spans);
        } catch (const NetworkError& e) {
          seen[static_cast<std::size_t>(rr.rank)] = e.what();
        }
      },
      5);
  for (const auto& e : errors) CHECK(e == "");
  // Rank 1 refuses; a rank that had every block before the failure reached it may finish.
  CHECK_FALSE(seen[1].empty());
  for (const auto& s : seen) {
    if (s.empty()) continue;
    CHECK_MESSAGE(s.find("rank 1 expected the all-gather of call 1 step 0 piece 0, 41 bytes, from rank 0 but got the "
                         "all-gather of call 1 step 0 piece 0, 40 bytes") != std::string::npos,
                  s);
  }
}

TEST_CASE("all-gather: a peer that dies on entering, or after its first pass, fails the ranks that need it, naming it") {
  for (const int world : {2, 3, 4})
    for (const bool first_pass : {false, true}) {
      if (first_pass && world == 2) continue;  // one pass is the whole all-gather
      CAPTURE(world);
      CAPTURE(first_pass);
      const int dying = 1;
      auto run = [&](RankRing& rr, bool dies) {
        std::vector<std::vector<std::byte>> blocks(static_cast<std::size_t>(world), std::vector<std::byte>(9000));
        std::vector<std::span<std::byte>> spans(blocks.begin(), blocks.end());
        if (!dies) {
          AllGather(rr.transport, test::kSmallFrame).run(spans);
          return;
        }
        if (!first_pass) return;
        Exchange x(rr.transport, test::kSmallFrame);  // step 0 as AllGather::run makes it
        x.send(rr.transport.successor(), {Kind::all_gather, 1, 0}, spans[static_cast<std::size_t>(rr.rank)]);
        x.receive(rr.transport.predecessor(), {Kind::all_gather, 1, 0},
                  spans[static_cast<std::size_t>((rr.rank - 1 + world) % world)]);
        x.wait();
      };
      const auto seen = test::with_dying_rank(
          world, dying, [&](RankRing& rr) { run(rr, true); }, [&](RankRing& rr) { run(rr, false); });
      test::check_survivors(seen, dying, !first_pass);
    }
}
