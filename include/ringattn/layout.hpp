// ringattn — how the token axis is cut into P shards, and which global positions and
// rows each shard holds. A ring takes any strictly increasing positions per rank; these
// are the layouts the CLI offers and an embedding job can use as they are.
//
//   contiguous  shard i holds one run of tokens; sizes differ by at most one when P does
//               not divide N (the first N mod P shards hold one more). Causal load is
//               unbalanced: shard i does i+1 of P block pairs.
//   zigzag      the sequence is cut into 2P chunks (sizes differ by at most one); shard i
//               holds chunk i and chunk 2P-1-i, so every shard carries 2P+1 units of
//               causal work.
//   striped     token t lives on shard t mod P; every block is spread over the whole
//               sequence, so causal work is balanced to within one token per block.
// A shard's positions always increase, which the kernel relies on to skip masked tiles.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ringattn/positions.hpp"

namespace ringattn {

enum class Layout : std::uint8_t { contiguous = 0, zigzag = 1, striped = 2 };

std::string_view to_string(Layout l);
Layout parse_layout(std::string_view s);  // throws InvalidArgument naming the value

// The global positions held by `shard` of `shards` for a sequence of `tokens`; these
// are also the row indices of the shard in the [tokens, ...] input and output tensors.
// Throws InvalidArgument if there are fewer tokens than the layout needs (contiguous
// and striped: N >= P; zigzag: N >= 2P) so that no shard is empty.
Positions shard_positions(Layout layout, std::int64_t tokens, int shards, int shard);

// The largest shard: the size of the transfer buffers.
std::int64_t max_shard_rows(Layout layout, std::int64_t tokens, int shards);

// The shard's rows as half-open [begin, end) runs of the global token order (for
// reading inputs and writing outputs).
struct RowRun {
  std::int64_t begin, end;
};
std::vector<RowRun> shard_row_runs(const Positions& p);

}  // namespace ringattn
