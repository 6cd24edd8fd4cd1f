// The packed-batch sharding helper (include/ringattn/packing.hpp): every token on exactly
// one rank, positions strictly increasing and documents non-decreasing per rank, and the
// balance it reaches on a mixed batch against naive contiguous sharding (timing-free:
// useful work is counted in visible (query, key) pairs).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn/packing.hpp"
#include "src/oracle/random_inputs.hpp"

using namespace ringattn;

namespace {

void check_partition(std::span<const std::int64_t> cu, const std::vector<PackedShard>& shards) {
  std::vector<int> seen(static_cast<std::size_t>(cu.back()), 0);
  const auto ids = document_ids(cu);
  for (const auto& s : shards) {
    REQUIRE(s.positions.size() == s.documents.size());
    for (std::size_t i = 0; i < s.positions.size(); ++i) {
      if (i) {
        CHECK(s.positions[i] > s.positions[i - 1]);
        CHECK(s.documents[i] >= s.documents[i - 1]);
      }
      ++seen[static_cast<std::size_t>(s.positions[i])];
      CHECK(s.documents[i] == ids[static_cast<std::size_t>(s.positions[i])]);
    }
  }
  for (int n : seen) CHECK(n == 1);
}

}  // namespace

TEST_CASE("packing: every token on one rank, increasing positions, non-decreasing documents") {
  const std::vector<std::vector<std::int64_t>> batches = {
      {0, 100, 137, 1037},          // the example in docs/running.md
      {0, 1, 3, 4, 6, 7},           // only tiny documents (< 2P)
      {0, 0, 5, 5, 40},             // empty documents
      {0, 3, 7},                    // one tiny document per rank at most: empty ranks are filled
      {0, 1000, 1001, 1003, 4000},  // tiny ones between long ones
  };
  for (int P : {1, 2, 3, 4, 7}) {
    for (const auto& cu : batches) {
      INFO("P=" << P << " tokens=" << cu.back());
      const auto bal = shard_documents(cu, P);
      REQUIRE(bal.size() == static_cast<std::size_t>(P));
      for (const auto& s : bal) CHECK_FALSE(s.positions.empty());
      check_partition(cu, bal);
      check_partition(cu, shard_documents_contiguous(cu, P));
    }
  }
}

TEST_CASE("packing: bad cu_seqlens are refused with the entry named") {
  CHECK_THROWS_AS(shard_documents(std::vector<std::int64_t>{5, 10}, 2), InvalidArgument);
  CHECK_THROWS_AS(shard_documents(std::vector<std::int64_t>{0}, 2), InvalidArgument);
  CHECK_THROWS_WITH_AS(shard_documents(std::vector<std::int64_t>{0, 10, 7}, 2),
                       doctest::Contains("entry 2 = 7"), InvalidArgument);
  CHECK_THROWS_AS(shard_documents(std::vector<std::int64_t>{0, 10}, 0), InvalidArgument);
  CHECK_THROWS_WITH_AS(shard_documents(std::vector<std::int64_t>{0, 1, 3}, 4), doctest::Contains("at least one row"),
                       InvalidArgument);
}

TEST_CASE("packing: visible pairs per rank count each document's causal triangle once") {
  const std::vector<std::int64_t> cu = {0, 100, 137, 1037};
  for (int P : {1, 2, 4}) {
    const auto work = visible_pairs(cu, shard_documents(cu, P), Mask::causal());
    double total = 0;
    for (double w : work) total += w;
    CHECK(total == 100.0 * 101 / 2 + 37.0 * 38 / 2 + 900.0 * 901 / 2);
    const auto none = visible_pairs(cu, shard_documents(cu, P), Mask::none());
    double total_none = 0;
    for (double w : none) total_none += w;
    CHECK(total_none == 100.0 * 100 + 37.0 * 37 + 900.0 * 900);
  }
}

TEST_CASE("packing: a mixed batch of 64 prompts (16..8192 tokens, long-tailed) at P = 4 is balanced to 1.1") {
  const auto cu = oracle::mixed_batch_cu_seqlens(64, 16, 8192, 20261130);
  const int P = 4;
  const auto balanced = visible_pairs(cu, shard_documents(cu, P), Mask::causal());
  const auto naive = visible_pairs(cu, shard_documents_contiguous(cu, P), Mask::causal());
  const double b = max_over_mean(balanced), n = max_over_mean(naive);
  std::printf("packing balance: 64 prompts, %lld tokens, P = %d, causal within documents: max/mean useful work "
              "%.4f (shard_documents) vs %.4f (contiguous)\n",
              static_cast<long long>(cu.back()), P, b, n);
  CHECK(b <= 1.1);
  CHECK(b < n);
}

// Issue 45: counts and ids a caller passes are checked before anything is read or pushed.
TEST_CASE("packing: a negative document id, too many tokens or ranks are refused before anything is read or pushed") {
  const std::vector<std::int64_t> cu = {0, 4, 8};
  // Document -1 became index SIZE_MAX: cu[SIZE_MAX] was read.
  PackedShard bad;
  bad.positions = {0, 1};
  bad.documents = {0, -1};
  CHECK_THROWS_WITH_AS(visible_pairs(cu, {bad}, Mask::causal()), doctest::Contains("row 1 has document id -1 < 0"),
                       InvalidArgument);
  PackedShard lowest;
  lowest.positions = {0};
  lowest.documents = {INT32_MIN};
  CHECK_THROWS_WITH_AS(visible_pairs(cu, {lowest}, Mask::none()), doctest::Contains("< 0"), InvalidArgument);
  // 2^40 tokens over 2 ranks: 2^40 positions were pushed before any bound.
  const std::vector<std::int64_t> huge = {0, std::int64_t{1} << 40};
  CHECK_THROWS_WITH_AS(shard_documents(huge, 2), doctest::Contains("exceed 1073741824 rows a rank"), InvalidArgument);
  CHECK_THROWS_WITH_AS(shard_documents_contiguous(huge, 2), doctest::Contains("exceed"), InvalidArgument);
  CHECK_THROWS_WITH_AS(shard_documents(cu, kMaxWorldSize + 1), doctest::Contains("shards = 1048577"), InvalidArgument);
  const std::vector<std::int64_t> two_ranks_full = {0, 2 * kMaxRankRows + 1};
  CHECK_THROWS_AS(shard_documents_contiguous(two_ranks_full, 2), InvalidArgument);
}

TEST_CASE("layout: striped shards of a sequence near INT64_MAX tokens hold ceil((N - r) / P) rows, within it") {
  for (const std::int64_t tokens : {INT64_MAX, INT64_MAX - 1, INT64_MAX - 2}) {
    for (const int shards : {1, 2, 3, 7}) {
      for (int r = 0; r < shards; ++r) {
        const Positions p = shard_positions(Layout::striped, tokens, shards, r);
        // tokens - r = q * shards + rem: q rows, one more if rem > 0 (no sum that overflows)
        const std::int64_t want = (tokens - r) / shards + ((tokens - r) % shards != 0 ? 1 : 0);
        CHECK(p.size() == want);
        const std::int64_t last = p.at(p.size() - 1);
        CHECK(last <= tokens - 1);
        CHECK(last > tokens - 1 - shards);
      }
    }
  }
}
