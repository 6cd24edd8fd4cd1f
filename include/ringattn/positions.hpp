// ringattn — global token positions of the rows of a block.
//
// Masks are evaluated on global positions, never on row indices, because under the
// zigzag and striped layouts a node's rows are not a contiguous run of the sequence.
// A block's positions are a short list of arithmetic runs (first, stride, count);
// every layout ringattn uses is described by one or two runs:
//   contiguous shard i of size b:      {i*b, 1, b}
//   zigzag (2P chunks of size c):      {i*c, 1, c}, {(2P-1-i)*c, 1, c}
//   striped (token t on node t mod P): {i, P, ceil((N-i)/P)}
// Positions must be strictly increasing over the whole block; the kernel relies on it
// to bound a tile's positions by its first and last row and skip masked tiles.
#pragma once

#include <cstdint>
#include <vector>

namespace ringattn {

struct PositionRun {
  std::int64_t first = 0;
  std::int64_t stride = 1;  // >= 1
  std::int64_t count = 0;   // >= 0
};

class Positions {
 public:
  Positions() = default;
  explicit Positions(std::vector<PositionRun> runs);  // validates: strides >= 1, increasing

  static Positions contiguous(std::int64_t first, std::int64_t count);
  static Positions strided(std::int64_t first, std::int64_t stride, std::int64_t count);
  // Any strictly increasing, non-negative positions, compressed into as few runs as
  // there are changes of stride. Throws InvalidArgument naming the first row out of order.
  static Positions from_sorted(const std::int64_t* positions, std::int64_t count);

  std::int64_t size() const { return size_; }
  const std::vector<PositionRun>& runs() const { return runs_; }

  // Position of row r, 0 <= r < size(). O(number of runs).
  std::int64_t at(std::int64_t r) const;
  // All positions, in row order.
  std::vector<std::int64_t> materialize() const;
  void materialize_into(std::vector<std::int64_t>& out) const;  // reuses out's capacity

 private:
  std::vector<PositionRun> runs_;
  std::int64_t size_ = 0;
};

}  // namespace ringattn
