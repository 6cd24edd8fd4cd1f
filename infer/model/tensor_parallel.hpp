// infer — Megatron's tensor-parallel split of the model over a group of T ranks (a mesh's
// group, RingOptions::group_size = T): each rank holds and multiplies one T-th of every
// layer, and the group adds up what each rank's part contributes.
//
//   attention  Q, K, V by columns (rank t: its query heads, the K/V heads they read),
//              attention on those heads only, O by rows        -> one sum over the group
//   MLP        gate and up by columns (rank t: its ffn units), down by rows -> one sum
//   vocabulary the embedding and the classifier by vocabulary rows: a token's embedding
//              row is on one rank (the others add zeros: one sum), the logits are every
//              rank's columns gathered
//
// A sum over the group ends with the same bits on every rank (the ring all-reduce), so the
// ranks of a group hold the same hidden rows throughout and choose the same tokens. Against
// one rank (T = 1) only the order of the sums after O and down differs: ~1e-7 relative.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <ringattn/tensor_types.hpp>
#include <ringattn/types.hpp>

namespace infer {

struct ModelConfig;

// This rank's place in its tensor-parallel group: rank in [0, size).
struct TpShard {
  int rank = 0, size = 1;
};

// A run [first, first + count) of one dimension.
struct Part {
  std::int64_t first = 0, count = 0;
  std::int64_t end() const { return first + count; }
};

// Part `rank` of n split in `size` runs as even as can be (the first n % size one longer).
Part part_of(std::int64_t n, int rank, int size);

// What one rank of a group holds of a model.
struct TpParts {
  TpShard shard;
  Part heads;     // query heads
  Part kv_heads;  // K/V heads: a run of them, or (fewer K/V heads than ranks) the one its query heads read
  Part ffn;       // MLP units: gate and up rows, down columns
  Part vocab;     // embedding and classifier rows
  std::vector<std::size_t> vocab_counts;  // every rank's vocab.count, for gathering logits

  bool split() const { return shard.size > 1; }
  // Throws ringattn::InvalidArgument naming what the group cannot split: query heads not a
  // multiple of size, K/V heads neither a multiple nor a divisor of size, ffn or vocab
  // smaller than size, or a rank outside [0, size).
  static TpParts of(const ModelConfig& c, TpShard shard);
};

// Where a part's columns lie in each row of a file's weight of `type`: `skip` bytes from
// the row's start, `take` bytes, of a row of `row` bytes (row_values values). The split
// rule is the table of tensor types' (TensorType::splits_at): the part starts and ends on
// the type's whole blocks, else FileError "<where>: this rank's tensor-parallel part holds
// its columns [a, b), which do not start and end on the q8_0 blocks of 32 values ...".
// Columns outside the row, or a row not whole blocks: InvalidArgument naming them.
struct ColumnCut {
  std::size_t row = 0, skip = 0, take = 0;
};
ColumnCut column_cut(const ringattn::TensorType& type, std::int64_t row_values, Part cols, const std::string& where);

// The group's two collectives, as the model calls them: the job gives the ring's group
// scope (Ring::all_reduce / all_gather with Scope::group), tests an in-process group. Every
// rank of the group calls each in the same order with the same sizes.
class TpGroup {
 public:
  virtual ~TpGroup() = default;
  // data becomes its element-wise sum over the group, the same bits on every rank.
  virtual void sum(std::span<float> data) = 0;
  // data [sum of counts] holds every rank's chunk end to end (counts[r] floats from rank r);
  // this rank's chunk is in place on entry.
  virtual void gather(std::span<float> data, std::span<const std::size_t> counts) = 0;
};

}  // namespace infer
