// ringattn serve — what daemons say to each other: Ring messages (ringattn/messages.hpp),
// one type per message and one struct or layout each, encoded and decoded here only.
// Every field a peer sends is checked against the job and the ring before it sizes or
// indexes anything; a bad one throws NetworkError (protocol) naming the message and rank.
//
//   type    from -> to        payload (little-endian)
//   INFO    worker -> rank 0  NodeInfo: rank u32 | threads u32 | host, control, metrics,
//                             version, isa: each u32 length + bytes (<= kMaxText)
//   TABLE   rank 0 -> worker  u32 count, then count NodeInfos, by rank
//   SHARD   rank 0 -> worker  the job's description (32 bytes, below) | the shard's global
//                             positions i64 x rows | K rows | V rows (fp32)
//   QUERY   rank 0 -> worker  the shard's Q rows, [rows, heads*head_dim] fp32
//   RESULT  worker -> rank 0  O and lse rows side by side, [rows, heads*head_dim + heads] fp32
//   STATS   worker -> rank 0  NodeResult: eight f64 (seconds, compute, wait, flops, steps,
//                             skipped, bytes sent, rows)
//   JOB     rank 0 -> worker  one byte, JobKind: the job that follows is attention (SHARD,
//                             QUERY ...) or generation (GENERATE); it opens every job
//   GENERATE rank 0 -> worker the batch of a hosted model's requests (its layout: generation.hpp)
//   DONE    rank 0 -> worker  empty, once every result of the job is in: a worker waits for
//                             it before its next job or before it leaves, so that a draining
//                             worker's notice of leaving cannot reach rank 0 (around the
//                             ring) before another rank's result
//
// The job description: heads u32 | kv_heads u32 | head_dim u32 | mask u8 | dtype u8 |
// want_lse u8 | layout u8 | window i64 | tokens i64 (rows follow from the payload's size).
// K, V and Q travel as fp32 whatever the job's dtype (the daemons convert, as `run` does).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ringattn/positions.hpp"
#include "ringattn/ring.hpp"
#include "job.hpp"
#include "payload_codec.hpp"

namespace ringattn::serve::peer {

enum class Msg : std::uint32_t { info = 1, table = 2, shard = 3, query = 4, result = 5, stats = 6, done = 7, job = 8, generate = 9 };
// JOB's one byte: what the job's next message is (SHARD or GENERATE), or no job at all:
// RELEASE ends the ring (a rank asked to leave; every rank re-forms, the leaving one goes).
enum class JobKind : std::uint8_t { attention = 1, generation = 2, release = 3 };
// The values are the wire's: daemons of one version talk to each other, and a renumbering
// would still be a protocol change, so each is pinned.
static_assert(static_cast<std::uint32_t>(Msg::info) == 1 && static_cast<std::uint32_t>(Msg::table) == 2 &&
              static_cast<std::uint32_t>(Msg::shard) == 3 && static_cast<std::uint32_t>(Msg::query) == 4 &&
              static_cast<std::uint32_t>(Msg::result) == 5 && static_cast<std::uint32_t>(Msg::stats) == 6 &&
              static_cast<std::uint32_t>(Msg::done) == 7 && static_cast<std::uint32_t>(Msg::job) == 8 &&
              static_cast<std::uint32_t>(Msg::generate) == 9);
static_assert(static_cast<std::uint8_t>(JobKind::attention) == 1 && static_cast<std::uint8_t>(JobKind::generation) == 2 &&
              static_cast<std::uint8_t>(JobKind::release) == 3);
std::string_view to_string(Msg m);  // "INFO", ...

// Who a daemon is, for `status` and for redirecting clients to rank 0.
struct NodeInfo {
  int rank = 0;
  int threads = 0;
  std::string host, control, metrics, version, isa;
};
std::vector<std::byte> encode_info(const NodeInfo& n);
NodeInfo decode_info(std::span<const std::byte> payload, int from);
std::vector<std::byte> encode_table(const std::vector<NodeInfo>& nodes);
std::vector<NodeInfo> decode_table(std::span<const std::byte> payload, int world);

// A shard of a job, as the client uploads it and as rank 0 forwards it: the SHARD payload
// and the QUERY payload. shard_payload() sizes one and fills in the description and the
// positions; K, V and Q are read straight into the spans of shard_view()/query_rows(),
// with no copy on rank 0.
std::vector<std::byte> shard_payload(const JobRequest& q, const Positions& pos);
std::vector<std::byte> query_payload(const JobRequest& q, const Positions& pos);
std::span<float> query_rows(std::vector<std::byte>& payload);

// A SHARD payload's parts (spans into it). decode_shard checks every field against the
// ring (its world size and limits) and the payload's size.
struct Shard {
  JobRequest request;
  std::vector<std::int64_t> positions;
  std::span<float> k, v;
};
Shard shard_view(std::vector<std::byte>& payload, const JobRequest& q, std::int64_t rows);
Shard decode_shard(std::vector<std::byte>& payload, int world, const RingLimits& limits);

std::vector<std::byte> encode_stats(const NodeResult& r);
NodeResult decode_stats(std::span<const std::byte> payload, int rank);

// Sends and waits (the ring's deadline of silence bounds the wait).
void send(Ring& ring, int to, Msg type, std::uint64_t job, std::span<const std::byte> payload);
// Receives the next message from `from`, which must be of `type` and job `job` (any job
// when `job` is 0), its payload exactly `want` bytes (any size up to the ring's largest
// frame when `want` is kAnySize) into `buf`.
inline constexpr std::uint64_t kAnySize = ~std::uint64_t{0};
MessageHeader receive(Ring& ring, int from, Msg type, std::uint64_t job, std::vector<std::byte>& buf,
                      std::uint64_t want = kAnySize);
// The same into a caller's span of exactly its size (a result straight into its rows).
MessageHeader receive_into(Ring& ring, int from, Msg type, std::uint64_t job, std::span<std::byte> into);

}  // namespace ringattn::serve::peer
