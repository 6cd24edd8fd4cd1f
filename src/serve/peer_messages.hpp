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
//   DONE   rank 0 -> worker   STATE: 1 x 1, once every result of the job is in: a worker
//                             waits for it before its next job or before it leaves, so that
//                             a draining worker's notice of leaving cannot reach rank 0
//                             (around the ring) before another rank's result
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
  kDone = 0x5241'5345'0007,
};

struct Frame {
  net::FrameHeader header;
  std::vector<std::byte> payload;
};

// Text in a STATE frame (padded with spaces to whole fp32 columns, split into rows that
// fit the ring's STATE limit).
Frame text_frame(const std::string& text, Tag tag, const RingLimits& limits);
std::string frame_text(std::span<const std::byte> payload);

// A shard of a job, as the client uploads it and as rank 0 forwards it: the SHARD payload
// (description, the rows' global positions, K rows, V rows) and the QUERY payload (Q rows).
// shard_payload() sizes one and fills in description and positions; K, V and Q are read
// straight into the spans of shard_view()/query_rows(), with no copy on rank 0.
std::vector<std::byte> shard_payload(const JobRequest& q, const Positions& pos);
std::vector<std::byte> query_payload(const JobRequest& q, const Positions& pos);
net::FrameHeader shard_header(std::uint64_t job_id, const JobRequest& q, std::int64_t rows);
net::FrameHeader query_header(std::uint64_t job_id, const JobRequest& q, std::int64_t rows);
std::span<float> query_rows(std::vector<std::byte>& payload);

// A SHARD payload's parts (spans into it). decode_shard checks every field against the
// frame and the ring (throws NetworkError, protocol, naming what is wrong).
struct Shard {
  JobRequest request;
  std::vector<std::int64_t> positions;
  std::span<float> k, v;
};
Shard shard_view(std::vector<std::byte>& payload, const JobRequest& q, std::int64_t rows);
Shard decode_shard(const net::FrameHeader& h, std::vector<std::byte>& payload, int world, const RingLimits& limits);

// Eight doubles: seconds, compute, wait, flops, steps, skipped, bytes sent, rows.
std::vector<std::byte> encode_stats(const NodeResult& r);
NodeResult decode_stats(std::span<const std::byte> payload, int rank);

}  // namespace ringattn::serve::peer
