// infer — the tensor-parallel split (tensor_parallel.hpp).
#include "tensor_parallel.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <optional>

#include "model.hpp"

namespace infer {

Part part_of(std::int64_t n, int rank, int size) {
  const std::int64_t base = n / size, extra = n % size, r = rank;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

TpParts TpParts::of(const ModelConfig& c, TpShard shard) {
  const int T = shard.size;
  auto refuse = [&](const std::string& what) {
    throw ringattn::InvalidArgument("tensor parallelism over " + std::to_string(T) + " ranks: " + what);
  };
  if (T < 1 || T > 1024) refuse("the group size must be in [1, 1024]");
  if (shard.rank < 0 || shard.rank >= T) refuse("rank " + std::to_string(shard.rank) + " is outside the group");
  if (c.heads % T != 0)
    refuse("the model's " + std::to_string(c.heads) + " query heads do not split in " + std::to_string(T) +
           " equal parts (a --tp dividing the heads)");
  if (c.kv_heads % T != 0 && T % c.kv_heads != 0)
    refuse("the model's " + std::to_string(c.kv_heads) + " K/V heads neither split in " + std::to_string(T) +
           " parts nor divide " + std::to_string(T) + " (a --tp that they divide or that divides them)");
  if (c.ffn < T || c.vocab < T) refuse("the MLP's " + std::to_string(c.ffn) + " units or the vocabulary of " +
                                       std::to_string(c.vocab) + " is smaller than the group");
  TpParts p;
  p.shard = shard;
  p.heads = part_of(c.heads, shard.rank, T);
  p.kv_heads = c.kv_heads % T == 0 ? part_of(c.kv_heads, shard.rank, T) : Part{shard.rank / (T / c.kv_heads), 1};
  p.ffn = part_of(c.ffn, shard.rank, T);
  p.vocab = part_of(c.vocab, shard.rank, T);
  for (int r = 0; r < T; ++r) p.vocab_counts.push_back(static_cast<std::size_t>(part_of(c.vocab, r, T).count));
  return p;
}

ColumnCut column_cut(const ringattn::TensorType& type, std::int64_t row_values, Part cols, const std::string& where) {
  const std::optional<std::uint64_t> row = type.row_bytes(row_values);
  if (!row || cols.first < 0 || cols.count < 0 || cols.first > row_values - cols.count)
    throw ringattn::InvalidArgument(where + ": columns [" + std::to_string(cols.first) + ", " + std::to_string(cols.end()) +
                                    ") of a row of " + std::to_string(row_values) + " " + std::string(type.name) +
                                    " values: outside the row, or the row is not whole blocks");
  if (!type.splits_at(cols.first) || !type.splits_at(cols.count))
    throw ringattn::FileError(where + ": this rank's tensor-parallel part holds its columns [" + std::to_string(cols.first) +
                              ", " + std::to_string(cols.end()) + "), which do not start and end on the " +
                              std::string(type.name) + " blocks of " + std::to_string(type.block_values) +
                              " values along a row (a --tp whose parts are whole blocks, or another file type)");
  // Both within the row: whole blocks of it, so neither overflows.
  return {static_cast<std::size_t>(*row), static_cast<std::size_t>(*type.row_bytes(cols.first)),
          static_cast<std::size_t>(*type.row_bytes(cols.count))};
}

}  // namespace infer
