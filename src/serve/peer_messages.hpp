// ringattn serve — what daemons say to each other over the ring's own links, in the
// transport's data frames (net/wire.hpp), beside the ring's K/V blocks:
//
//   INFO   worker -> rank 0   STATE frame carrying text: the worker's node info (JSON)
//   TABLE  rank 0 -> worker   STATE frame carrying text: every node's info (JSON array)
//   SHARD  rank 0 -> worker   KV_BLOCK: prefix = the job's description, tags = the
//                             shard's global positions, then its K and V (fp32)
//   QUERY  rank 0 -> worker   STATE: the shard's Q rows, [rows, heads*head_dim]
//   RESULT worker -> rank 0   STATE: O and lse rows, [rows, heads*head_dim + heads]
//   STATS  worker -> rank 0   STATE: 1 x 16, eight doubles (the worker's ForwardStats)
//
// The frame's step field says which (the ring's own frames number their steps from 0),
// its job_id is the job's. Every frame is bounded by the transport against the limits the
// ring agreed on, and decoded here against the job before any field indexes anything.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "net/wire.hpp"
#include "ringattn/positions.hpp"
#include "src/serve/job.hpp"

namespace ringattn::serve::peer {

enum Tag : std::uint64_t {
  kInfo = 0x5241'5345'0001,
  kTable = 0x5241'5345'0002,
  kShard = 0x5241'5345'0003,
  kQuery = 0x5241'5345'0004,
  kResult = 0x5241'5345'0005,
  kStats = 0x5241'5345'0006,
};

struct Frame {
  net::FrameHeader header;
  std::vector<std::byte> payload;
};

// Text in a STATE frame (padded with spaces to whole fp32 columns, split into rows that
// fit the ring's STATE limit).
Frame text_frame(const std::string& text, Tag tag, const RingLimits& limits);
std::string frame_text(std::span<const std::byte> payload);

// rank `shard`'s SHARD and QUERY frames of `job` (its rows gathered from the tensors).
Frame shard_frame(const Job& job, const Positions& pos);
Frame query_frame(const Job& job, const Positions& pos);

// A worker's decoded SHARD: the request and its rows (throws NetworkError, protocol, on a
// description that contradicts the frame).
struct Shard {
  JobRequest request;
  std::vector<std::int64_t> positions;
  std::vector<float> k, v;
};
Shard decode_shard(const net::FrameHeader& h, std::span<const std::byte> payload, int world, const RingLimits& limits);

// Copies rows of a [tokens, width] tensor into / out of a shard's [rows, width] rows.
void gather_rows(std::span<const float> all, std::int64_t width, const Positions& pos, std::span<float> rows);
void scatter_rows(std::span<const float> rows, std::int64_t row_width, std::int64_t offset, std::int64_t width,
                  const Positions& pos, std::span<float> all);

// Eight doubles: seconds, compute, wait, flops, steps, skipped, bytes sent, rows.
std::vector<std::byte> encode_stats(const NodeResult& r);
NodeResult decode_stats(std::span<const std::byte> payload, int rank);

}  // namespace ringattn::serve::peer
