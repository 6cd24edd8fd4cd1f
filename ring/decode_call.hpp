// ringattn — one decode call as the ring sees it: the spec every rank must agree on, the
// sizes of a token's q|k|v row, and the QUERY payload of this rank's tokens (written and
// checked here, laid out by ring/block_layout.hpp). decode.cpp composes the call from it
// and the schedules (all_gather.hpp, reduce_scatter.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/softmax_ops.hpp"
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
    const std::string msg = "rank " + std::to_string(rank()) + ": decode call " + std::to_string(call) + ": " + what;
    t.abort(cause, origin, msg.substr(msg.find(": ") + 2));
    throw NetworkError(msg, cause, origin);
  }

  // This rank's tokens as a queries payload (block_layout.hpp: BlockLayout::query).
  void encode(std::vector<std::byte>& out, std::span<const std::int32_t> seqs, std::span<const std::int64_t> pos,
              std::span<const float> q, std::span<const float> k, std::span<const float> v) const;
  // A received queries frame: checked before anything reads it. Returns its token count.
  std::size_t check_query(const net::FrameHeader& h, const std::vector<std::byte>& buf, int step, int expect);
};

}  // namespace ringattn::ring
