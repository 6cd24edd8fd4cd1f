// ringattn kernels — the tile plan of a block-attention fold: which (query tile, key
// tile) pairs the mask and the documents hide, show fully or show in part, and the
// matmul-sized pieces each shown pair is computed as. Positions increase and document ids
// never decrease, so a tile's first and last rows bound what it can see.
#pragma once

#include <cstdint>
#include <vector>

#include "ringattn/types.hpp"

namespace ringattn::kernels {

inline constexpr std::int64_t kTileQ = 256;  // query rows of a tile
// Partially masked tiles (the causal diagonal, window edges, document boundaries) are cut
// into strips of kStrip query rows, each computed only over its visible key columns
// rounded out to kStrip, so causal costs about half of non-causal instead of wasting the
// diagonal.
inline constexpr std::int64_t kStrip = 64;

// One matmul-sized piece of a (query tile, key tile) pair: rows [i0, i0+nr) of the query
// tile against columns [cl, cl+w) of the key tile. `partial` rows need their visible
// range looked up; full pieces see every column.
struct Piece {
  std::int64_t kt, i0, nr, cl, w;
  bool partial;
};

struct TileCount {
  std::int64_t computed = 0, skipped = 0;  // (query tile, key tile) pairs, per head
};

// plan[qt]: the pieces of query tile qt of `qpos` against keys `kpos` (nk of them, in key
// tiles of tile_k); qdocs and kdocs are both null without documents. plan only grows and
// its vectors keep their capacity, so repeated plans allocate nothing.
TileCount plan_tiles(const Mask& mask, const std::vector<std::int64_t>& qpos, const std::int32_t* qdocs,
                     const std::int64_t* kpos, const std::int32_t* kdocs, std::int64_t nk, std::int64_t tile_k,
                     std::vector<std::vector<Piece>>& plan);

}  // namespace ringattn::kernels
