// ringattn — one decode call as the ring sees it: the spec every rank must agree on, the
// sizes of a token's q|k|v row, the queries payload of this rank's tokens (written and
// checked here, laid out by ring/block_layout.hpp) and the partial states' rows. decode.cpp
// composes the call from it and two collectives of decode's family (ring/collectives/:
// the all-gather of the queries, sized on arrival, and the reduce-scatter of the partials,
// each computed while the last one travels), kept with their buffers in DecodeState.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/cache_attention.hpp"
#include "kernels/softmax_ops.hpp"
#include "ring/collectives/all_gather.hpp"
#include "ring/collectives/reduce_scatter.hpp"
#include "ringattn/block_attention.hpp"
#include "ring/block_layout.hpp"
#include "net/transport.hpp"
#include "ring/block_format.hpp"
#include "ringattn/error.hpp"

namespace ringattn::ring {

// One decode call's context: the spec, the sizes and the way to fail on the wire.
struct DecodeCall {
  net::Transport& t;
  const kernels::SoftmaxOps& ops;  // the call's ISA path: bf16 conversions
  CallSpec cs;
  std::uint64_t call = 0;
  std::int64_t H = 0, KH = 0, D = 0;
  std::size_t cols = 0, esz = 0;
  std::uint32_t max_rows = 0;  // the ring's limit on one rank's tokens

  int rank() const { return t.rank(); }
  int world() const { return t.world(); }
  BlockLayout layout(std::size_t rows) const {
    return BlockLayout::query(cs.dtype, static_cast<std::uint32_t>(cols), static_cast<std::uint32_t>(rows));
  }

  [[noreturn]] void refuse(FailureCause cause, int origin, const std::string& what) {
    const std::string msg = "rank " + std::to_string(t.ring_rank(rank())) + ": decode call " + std::to_string(call) + ": " + what;
    t.abort(cause, origin, msg.substr(msg.find(": ") + 2));
    throw NetworkError(msg, cause, origin);
  }

  // This rank's tokens as a queries payload (block_layout.hpp: BlockLayout::query).
  void encode(std::vector<std::byte>& out, std::span<const std::int32_t> seqs, std::span<const std::int64_t> pos,
              std::span<const float> q, std::span<const float> k, std::span<const float> v) const;
  // Queries that came from the predecessor at gather step `step`, origin `expect`'s:
  // checked before anything reads or relays them. Returns their token count.
  std::size_t check_query(const std::vector<std::byte>& buf, int step, int expect);
};

// A partial state's rows on the wire: per token o [heads * head_dim] | m [heads] | l [heads].
inline std::size_t state_row_floats(std::int64_t heads, std::int64_t head_dim) {
  return static_cast<std::size_t>(heads * (head_dim + 2));
}
void put_state(std::span<float> out, const OnlineSoftmaxState& s);
void get_state(std::span<const float> in, OnlineSoftmaxState& s);

// A ring's decode: its two collectives and the buffers a run of calls reuses.
struct DecodeState {
  DecodeState(net::Transport& t, std::uint64_t max_frame)
      : gather(t, max_frame, Family::decode), reduce(t, max_frame, Family::decode) {}
  collectives::AllGather gather;
  collectives::ReduceScatter reduce;
  std::vector<std::vector<std::byte>> gathered;   // every rank's queries payload, by origin
  std::vector<float> q;                           // every token's q, fp32, rows by origin
  std::vector<std::int64_t> positions;
  std::vector<std::int32_t> sequences;
  std::vector<float> partials;                    // by origin, state rows
  std::vector<std::size_t> counts;                // floats per origin's partial
  OnlineSoftmaxState mine, theirs;                // a computed partial; a merge's operands
  std::vector<kernels::CacheSegment> segments;    // one origin's tokens against this rank's cache
};

}  // namespace ringattn::ring
