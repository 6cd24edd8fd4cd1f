#include "ringattn/layout.hpp"

#include <algorithm>

#include "ringattn/error.hpp"

namespace ringattn {

std::string_view to_string(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::zigzag: return "zigzag";
    case Layout::striped: return "striped";
  }
  return "?";
}

Layout parse_layout(std::string_view s) {
  if (s == "contiguous") return Layout::contiguous;
  if (s == "zigzag") return Layout::zigzag;
  if (s == "striped") return Layout::striped;
  throw InvalidArgument("layout: expected contiguous, zigzag or striped; got '" + std::string(s) + "'");
}

namespace {

// Piece i of n equal-as-possible pieces of [0, total): the first total % n are longer.
void piece(std::int64_t total, std::int64_t n, std::int64_t i, std::int64_t* first, std::int64_t* count) {
  const std::int64_t base = total / n, extra = total % n;
  *first = i * base + std::min(i, extra);
  *count = base + (i < extra ? 1 : 0);
}

}  // namespace

Positions shard_positions(Layout layout, std::int64_t tokens, int shards, int shard) {
  if (shards < 1) throw InvalidArgument("layout: nodes = " + std::to_string(shards) + " must be >= 1");
  if (shard < 0 || shard >= shards)
    throw InvalidArgument("layout: rank " + std::to_string(shard) + " is outside 0.." + std::to_string(shards - 1));
  const std::int64_t need = layout == Layout::zigzag ? 2 * static_cast<std::int64_t>(shards) : shards;
  if (tokens < need)
    throw InvalidArgument("layout: " + std::string(to_string(layout)) + " over " + std::to_string(shards) +
                          " nodes needs at least " + std::to_string(need) + " tokens, got " + std::to_string(tokens));
  std::int64_t first, count;
  switch (layout) {
    case Layout::contiguous:
      piece(tokens, shards, shard, &first, &count);
      return Positions::contiguous(first, count);
    case Layout::zigzag: {
      std::int64_t f2, c2;
      piece(tokens, 2 * shards, shard, &first, &count);
      piece(tokens, 2 * shards, 2 * shards - 1 - shard, &f2, &c2);
      return Positions({PositionRun{first, 1, count}, PositionRun{f2, 1, c2}});
    }
    case Layout::striped:
      // ceil((tokens - shard) / shards) without the sum, which overflows near INT64_MAX
      // (tokens >= shards > shard, so tokens - shard >= 1).
      return Positions::strided(shard, shards, (tokens - shard - 1) / shards + 1);
  }
  throw InvalidArgument("layout: unknown layout");
}

std::int64_t max_shard_rows(Layout layout, std::int64_t tokens, int shards) {
  std::int64_t most = 0;
  for (int s = 0; s < shards; ++s) most = std::max(most, shard_positions(layout, tokens, shards, s).size());
  return most;
}

std::vector<RowRun> shard_row_runs(const Positions& p) {
  std::vector<RowRun> out;
  for (const auto& r : p.runs()) {
    if (r.count == 0) continue;
    if (r.stride == 1) {
      out.push_back({r.first, r.first + r.count});
    } else {
      for (std::int64_t i = 0; i < r.count; ++i) out.push_back({r.first + i * r.stride, r.first + i * r.stride + 1});
    }
  }
  return out;
}

}  // namespace ringattn
