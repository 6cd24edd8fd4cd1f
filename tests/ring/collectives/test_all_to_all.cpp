// The all-to-all of opaque blocks (ring/collectives/all_to_all.hpp) alone, on rings of 1-4
// thread ranks (every pair linked, non-neighbours dialled on the first frame): rank i's
// block for j arrives as rank j's block from i, for sizes that differ by pair (empty ones,
// several frames long), twice; a rank that expects another size is refused at that frame
// on every rank; a peer that dies mid-collective fails every other rank naming it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ring/collectives/all_to_all.hpp"
#include "tests/ring/collectives/collective_ranks.hpp"

using namespace ringattn;
using namespace ringattn::collectives;
using test::RankRing;

namespace {

std::size_t size_of(int from, int to) { return (from + 2 * to) % 3 == 0 ? 0 : static_cast<std::size_t>(2500 * from + 700 * to + 5); }

std::byte byte_of(int from, int to, std::size_t i) {
  return static_cast<std::byte>((i * 13 + static_cast<std::size_t>(from) * 37 + static_cast<std::size_t>(to) * 91) & 0xFF);
}

struct Blocks {
  std::vector<std::vector<std::byte>> out, in;
  std::vector<std::span<const std::byte>> send;
  std::vector<std::span<std::byte>> recv;
  Blocks(int rank, int world, std::size_t (*size)(int, int)) {
    for (int j = 0; j < world; ++j) {
      out.emplace_back(size(rank, j));
      for (std::size_t i = 0; i < out.back().size(); ++i) out.back()[i] = byte_of(rank, j, i);
      in.emplace_back(size(j, rank));
    }
    send.assign(out.begin(), out.end());
    recv.assign(in.begin(), in.end());
  }
};

}  // namespace

TEST_CASE("all-to-all: every pair's block at P = 1-4, sizes by pair, empty blocks, several frames a block") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    std::vector<int> good(static_cast<std::size_t>(world), 0);
    const auto errors = test::on_ring(world, [&](RankRing& rr) {
      AllToAll a2a(rr.transport, test::kSmallFrame);
      for (int round = 0; round < 2; ++round) {
        Blocks b(rr.rank, world, size_of);
        a2a.run(b.send, b.recv);
        bool all = true;
        for (int j = 0; j < world; ++j)
          for (std::size_t i = 0; i < b.in[static_cast<std::size_t>(j)].size(); ++i)
            all = all && b.in[static_cast<std::size_t>(j)][i] == byte_of(j, rr.rank, i);
        good[static_cast<std::size_t>(rr.rank)] += all;
      }
    });
    for (const auto& e : errors) CHECK(e == "");
    for (const int g : good) CHECK(g == 2);
  }
}

TEST_CASE("all-to-all: a rank that expects another size fails the ring, naming both; misuse is refused") {
  std::vector<std::string> seen(4);
  const auto errors = test::on_ring(
      4,
      [&](RankRing& rr) {
        AllToAll a2a(rr.transport, test::kSmallFrame);
        Blocks b(rr.rank, 4, [](int, int) { return std::size_t{64}; });
        if (rr.rank == 2) b.in[0].resize(65), b.recv[0] = b.in[0];  // rank 2 thinks rank 0 sends it 65
        try {
          a2a.run(b.send, b.recv);
        } catch (const NetworkError& e) {
          seen[static_cast<std::size_t>(rr.rank)] = e.what();
        }
      },
      5);
  for (const auto& e : errors) CHECK(e == "");
  // Rank 2 refuses; a rank that had its blocks before the failure reached it may finish.
  CHECK_FALSE(seen[2].empty());
  for (const auto& s : seen) {
    if (s.empty()) continue;
    CHECK_MESSAGE(s.find("rank 2 expected the all-to-all of call 1 step 2 piece 0, 65 bytes, from rank 0 but got the "
                         "all-to-all of call 1 step 2 piece 0, 64 bytes") != std::string::npos,
                  s);
  }
  const auto misuse = test::on_ring(1, [&](RankRing& rr) {
    AllToAll a2a(rr.transport, test::kSmallFrame);
    std::vector<std::byte> a(4), c(5);
    const std::vector<std::span<const std::byte>> send = {a};
    const std::vector<std::span<std::byte>> none, recv = {c};
    CHECK_THROWS_WITH_AS(a2a.run(send, none), doctest::Contains("1 blocks out and 0 in, in a ring of 1"), InvalidArgument);
    CHECK_THROWS_WITH_AS(a2a.run(send, recv), doctest::Contains("own block is 4 bytes out but 5 in"), InvalidArgument);
  });
  for (const auto& e : misuse) CHECK(e == "");
}

TEST_CASE("all-to-all: a peer that dies on entering, or after sending its first block, fails the ranks that need it, naming it") {
  for (const int world : {2, 3, 4})
    for (const bool first_block : {false, true}) {
      if (first_block && world == 2) continue;  // one block is the whole all-to-all
      CAPTURE(world);
      CAPTURE(first_block);
      const int dying = world - 1;
      const auto seen = test::with_dying_rank(
          world, dying,
          [&](RankRing& rr) {  // its first block out (to rank 0), as AllToAll::run posts it, then gone
            if (!first_block) return;
            Exchange x(rr.transport, test::kSmallFrame);
            std::vector<std::byte> out(size_of(rr.rank, 0));
            x.send(0, {Kind::all_to_all, 1, 1}, out);
            x.wait();
          },
          [&](RankRing& rr) {
            Blocks b(rr.rank, world, size_of);
            AllToAll(rr.transport, test::kSmallFrame).run(b.send, b.recv);
          });
      // Every survivor waits for a block from it (an empty block is a frame too), except
      // rank 0 once it has sent that one: rank 0 may finish.
      test::check_survivors(seen, dying, !first_block);
    }
}
