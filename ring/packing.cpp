// Packed variable-length batches (include/ringattn/packing.hpp): the balanced sharding
// helper, its naive baseline and the per-rank work they are measured by.
#include "ringattn/packing.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"

namespace ringattn {

namespace {

// Causal pairs of rows [a, b) of a document (row j sees j + 1 keys): sum of j + 1.
double causal_pairs(std::int64_t a, std::int64_t b) {
  return (static_cast<double>(b) * static_cast<double>(b + 1) - static_cast<double>(a) * static_cast<double>(a + 1)) / 2;
}

// Chunk i of n equal-as-possible chunks of [0, total): the first total % n are longer.
void chunk(std::int64_t total, std::int64_t n, std::int64_t i, std::int64_t* first, std::int64_t* count) {
  const std::int64_t base = total / n, extra = total % n;
  *first = i * base + std::min(i, extra);
  *count = base + (i < extra ? 1 : 0);
}

void check_tokens(const char* what, std::span<const std::int64_t> cu, int shards) {
  if (shards < 1 || shards > kMaxWorldSize)
    throw InvalidArgument(std::string(what) + ": shards = " + std::to_string(shards) + " must be in 1.." +
                          std::to_string(kMaxWorldSize));
  // Before a position is pushed: a batch larger than every rank's most rows cannot be run,
  // and its positions alone could exhaust memory.
  if (cu.back() > shards * kMaxRankRows)
    throw InvalidArgument(std::string(what) + ": " + std::to_string(cu.back()) + " tokens over " +
                          std::to_string(shards) + " ranks exceed " + std::to_string(kMaxRankRows) +
                          " rows a rank (the ceiling of RingLimits::max_rows); use more ranks or smaller batches");
  if (cu.back() < shards)
    throw InvalidArgument(std::string(what) + ": " + std::to_string(cu.back()) + " tokens for " +
                          std::to_string(shards) + " ranks: every rank needs at least one row (the ring sends no "
                          "empty blocks)");
}

constexpr double kWholeShare = 16;

int least_loaded(const std::vector<double>& load) {
  return static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
}

// Sorts each shard's positions and fills in their documents.
void finish_shards(std::span<const std::int64_t> cu, std::vector<PackedShard>& shards) {
  for (auto& s : shards) {
    std::sort(s.positions.begin(), s.positions.end());
    s.documents.resize(s.positions.size());
    std::size_t d = 0;
    for (std::size_t i = 0; i < s.positions.size(); ++i) {
      while (s.positions[i] >= cu[d + 1]) ++d;  // positions increase, so d only moves forward
      s.documents[i] = static_cast<std::int32_t>(d);
    }
  }
}

}  // namespace

void check_cu_seqlens(std::span<const std::int64_t> cu) {
  if (cu.size() < 2)
    throw InvalidArgument("cu_seqlens: needs at least 2 entries (0 and the total length), got " + std::to_string(cu.size()));
  if (cu.size() - 1 > static_cast<std::size_t>(INT32_MAX))
    throw InvalidArgument("cu_seqlens: " + std::to_string(cu.size() - 1) + " documents exceed the int32 document ids");
  if (cu[0] != 0) throw InvalidArgument("cu_seqlens: must start at 0, starts at " + std::to_string(cu[0]));
  for (std::size_t i = 1; i < cu.size(); ++i)
    if (cu[i] < cu[i - 1])
      throw InvalidArgument("cu_seqlens: entry " + std::to_string(i) + " = " + std::to_string(cu[i]) +
                            " is less than entry " + std::to_string(i - 1) + " = " + std::to_string(cu[i - 1]) +
                            " (cumulative lengths never decrease)");
}

std::vector<std::int32_t> document_ids(std::span<const std::int64_t> cu) {
  check_cu_seqlens(cu);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(cu.back()));
  for (std::size_t d = 0; d + 1 < cu.size(); ++d)
    std::fill(ids.begin() + cu[d], ids.begin() + cu[d + 1], static_cast<std::int32_t>(d));
  return ids;
}

std::vector<PackedShard> shard_documents(std::span<const std::int64_t> cu, int shards) {
  check_cu_seqlens(cu);
  check_tokens("shard_documents", cu, shards);
  const std::int64_t P = shards, docs = static_cast<std::int64_t>(cu.size()) - 1;
  std::vector<PackedShard> out(static_cast<std::size_t>(P));
  std::vector<double> load(static_cast<std::size_t>(P), 0.0);
  // Whole documents: shorter than 2P, or light enough (at most 1/kWholeShare of a rank's
  // share of the causal work) that placing them whole, heaviest first on the least-loaded
  // rank, costs at most that much balance.
  double total = 0;
  for (std::int64_t d = 0; d < docs; ++d) total += causal_pairs(0, cu[d + 1] - cu[d]);
  const double whole_limit = total / static_cast<double>(P) / kWholeShare;
  std::vector<std::int64_t> whole;
  struct Pair {
    double work;
    std::int64_t first[2], count[2];
  };
  std::vector<Pair> pairs(static_cast<std::size_t>(P));
  std::vector<int> ranks(static_cast<std::size_t>(P));
  for (std::int64_t d = 0; d < docs; ++d) {
    const std::int64_t start = cu[d], len = cu[d + 1] - cu[d];
    if (len < 2 * P || causal_pairs(0, len) <= whole_limit) {
      if (len > 0) whole.push_back(d);
      continue;
    }
    for (std::int64_t i = 0; i < P; ++i) {
      auto& pr = pairs[static_cast<std::size_t>(i)];
      chunk(len, 2 * P, i, &pr.first[0], &pr.count[0]);
      chunk(len, 2 * P, 2 * P - 1 - i, &pr.first[1], &pr.count[1]);
      pr.work = causal_pairs(pr.first[0], pr.first[0] + pr.count[0]) + causal_pairs(pr.first[1], pr.first[1] + pr.count[1]);
    }
    std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.work > b.work; });
    std::iota(ranks.begin(), ranks.end(), 0);
    std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) { return load[static_cast<std::size_t>(a)] < load[static_cast<std::size_t>(b)]; });
    for (std::int64_t i = 0; i < P; ++i) {
      const auto r = static_cast<std::size_t>(ranks[static_cast<std::size_t>(i)]);
      const auto& pr = pairs[static_cast<std::size_t>(i)];
      for (int c = 0; c < 2; ++c)
        for (std::int64_t j = 0; j < pr.count[c]; ++j) out[r].positions.push_back(start + pr.first[c] + j);
      load[r] += pr.work;
    }
  }
  // Longest first onto the least-loaded rank.
  std::stable_sort(whole.begin(), whole.end(), [&](std::int64_t a, std::int64_t b) { return cu[a + 1] - cu[a] > cu[b + 1] - cu[b]; });
  for (const std::int64_t d : whole) {
    const auto r = static_cast<std::size_t>(least_loaded(load));
    for (std::int64_t p = cu[d]; p < cu[d + 1]; ++p) out[r].positions.push_back(p);
    load[r] += causal_pairs(0, cu[d + 1] - cu[d]);
  }
  // Tiny documents alone may leave a rank empty (one document of 3 tokens over 2 ranks):
  // it takes the last row of the rank with the most rows. Any increasing positions work.
  for (auto& s : out) {
    if (!s.positions.empty()) continue;
    auto& most = *std::max_element(out.begin(), out.end(), [](const PackedShard& a, const PackedShard& b) {
      return a.positions.size() < b.positions.size();
    });
    auto last = std::max_element(most.positions.begin(), most.positions.end());
    s.positions.push_back(*last);
    most.positions.erase(last);
  }
  finish_shards(cu, out);
  return out;
}

std::vector<PackedShard> shard_documents_contiguous(std::span<const std::int64_t> cu, int shards) {
  check_cu_seqlens(cu);
  check_tokens("shard_documents_contiguous", cu, shards);
  std::vector<PackedShard> out(static_cast<std::size_t>(shards));
  for (int r = 0; r < shards; ++r) {
    std::int64_t first, count;
    chunk(cu.back(), shards, r, &first, &count);
    for (std::int64_t j = 0; j < count; ++j) out[static_cast<std::size_t>(r)].positions.push_back(first + j);
  }
  finish_shards(cu, out);
  return out;
}

std::vector<double> visible_pairs(std::span<const std::int64_t> cu, const std::vector<PackedShard>& shards,
                                  const Mask& mask) {
  check_cu_seqlens(cu);
  std::vector<double> work;
  for (const auto& s : shards) {
    if (s.documents.size() != s.positions.size())
      throw InvalidArgument("visible_pairs: a shard has " + std::to_string(s.positions.size()) + " positions but " +
                            std::to_string(s.documents.size()) + " document ids");
    double w = 0;
    for (std::size_t i = 0; i < s.positions.size(); ++i) {
      if (s.documents[i] < 0)  // before the cast: -1 would index cu[SIZE_MAX]
        throw InvalidArgument("visible_pairs: row " + std::to_string(i) + " has document id " +
                              std::to_string(s.documents[i]) + " < 0 (ids are 0.." + std::to_string(cu.size() - 2) + ")");
      const auto d = static_cast<std::size_t>(s.documents[i]);
      if (d + 1 >= cu.size() || s.positions[i] < cu[d] || s.positions[i] >= cu[d + 1])
        throw InvalidArgument("visible_pairs: position " + std::to_string(s.positions[i]) + " is not in document " +
                              std::to_string(d));
      const std::int64_t before = s.positions[i] - cu[d] + 1;  // keys of its document up to itself
      switch (mask.kind) {
        case MaskKind::none: w += static_cast<double>(cu[d + 1] - cu[d]); break;
        case MaskKind::causal: w += static_cast<double>(before); break;
        case MaskKind::window: w += static_cast<double>(std::min(before, mask.window)); break;
      }
    }
    work.push_back(w);
  }
  return work;
}

double max_over_mean(const std::vector<double>& work) {
  if (work.empty()) return 1;
  const double sum = std::accumulate(work.begin(), work.end(), 0.0);
  if (sum == 0) return 1;
  return *std::max_element(work.begin(), work.end()) / (sum / static_cast<double>(work.size()));
}

}  // namespace ringattn
