// ringattn serve — one submitted job: what the client asked for (validated against the
// ring's limits before anything is allocated), its tensors, and the events that travel
// back to the client's connection from the ring thread.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <span>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn/positions.hpp"
#include "ringattn/ring.hpp"

namespace ringattn::serve {

// A job: the call's shape (heads, kv_heads, head_dim, dtype, mask; the scale is always
// the default) and what the daemons need beyond it.
struct JobRequest : AttentionSpec {
  std::int64_t tokens = 0;
  Layout layout = Layout::contiguous;
  bool dtype_given = true;  // false: the daemons' wire_dtype decides (not sent)
  bool want_lse = false;

  std::uint64_t q_bytes() const { return static_cast<std::uint64_t>(tokens * heads * head_dim) * 4; }
  std::uint64_t kv_bytes() const { return static_cast<std::uint64_t>(tokens * kv_heads * head_dim) * 4; }
  std::uint64_t lse_bytes() const { return static_cast<std::uint64_t>(tokens * heads) * 4; }
  const AttentionSpec& spec() const { return *this; }
  std::string describe() const;  // "N 2048, H 8/8, D 128, fp32, causal, zigzag"
};

// The request's JSON as the client sends it, checked field by field against the ring
// (world size: the layout needs enough tokens; limits: the largest shard, heads, head
// dim) and against `max_job_bytes` (the daemon's memory for one job). Throws
// InvalidArgument naming the field.
// A request without a dtype gets `default_dtype` (the daemons' wire_dtype).
JobRequest parse_job_request(const std::string& json, int world, const RingLimits& limits, std::uint64_t max_job_bytes,
                             DType default_dtype = DType::f32);
std::string job_request_json(const JobRequest& r);  // what submit sends

// Events from any thread to a coroutine on one executor, in order.
class EventQueue {
 public:
  explicit EventQueue(const asio::any_io_executor& ex);
  void push(std::string event);  // any thread
  void close();                  // any thread: no more events after those queued
  // On the executor: the next event; nullopt once closed and drained; "" after `idle`
  // passed without one.
  asio::awaitable<std::optional<std::string>> next(std::chrono::milliseconds idle);

 private:
  void wake();
  asio::any_io_executor ex_;
  std::shared_ptr<asio::steady_timer> timer_;
  std::mutex mu_;
  std::deque<std::string> events_;
  bool closed_ = false;
};

enum class JobResult { ok, failed, aborted };

struct NodeResult {
  int rank = 0;
  std::int64_t rows = 0;
  double seconds = 0, compute_seconds = 0, wait_seconds = 0, useful_flops = 0;
  int steps = 0, steps_skipped = 0;
  std::uint64_t bytes_sent = 0;
};

// Copies the rows of a shard out of / into a whole [tokens, width] tensor (rows in the
// order of `pos`; scatter takes `width` columns at `offset` of rows `row_width` wide).
void gather_rows(std::span<const float> all, std::int64_t width, const Positions& pos, std::span<float> rows);
void scatter_rows(std::span<const float> rows, std::int64_t row_width, std::int64_t offset, std::int64_t width,
                  const Positions& pos, std::span<float> all);

// One rank's shard of a job as its client uploaded it (peer_messages.hpp's SHARD and QUERY
// payloads), from the connection to the ring thread.
struct ShardUpload {
  int rank = 0;
  std::vector<std::byte> kv, q;
};

struct Job {
  std::uint64_t id = 0;
  JobRequest request;
  std::shared_ptr<EventQueue> events;

  // The upload, rank by rank (1..P-1, then 0: the workers start while rank 0's rows still
  // arrive). The connection pushes, the ring thread takes; a failed upload (the client
  // went away or fell silent, or sent rows the daemon refused: `why`) ends it.
  void push_upload(ShardUpload u);
  void fail_upload(const std::string& why = "");
  std::string upload_error() const;  // the first `why` given, or "" (the client went away)
  std::optional<ShardUpload> next_upload();  // nullopt once the upload failed
  // Per rank, its rows x (heads*head_dim + heads): O then lse of each row (the ring thread
  // fills them before "done"; the connection sends them to the client).
  std::vector<std::vector<float>> results;
  std::atomic<bool> cancelled{false};  // the client went away
  std::chrono::steady_clock::time_point queued_at = std::chrono::steady_clock::now();

  // Set by the ring thread before the final event.
  JobResult result = JobResult::failed;
  std::string error;
  FailureCause cause = FailureCause::unknown;
  int origin_rank = -1;
  std::vector<NodeResult> nodes;
  double ring_seconds = 0, job_seconds = 0;

 private:
  mutable std::mutex upload_mu_;
  std::condition_variable upload_cv_;
  std::deque<ShardUpload> uploads_;
  bool upload_failed_ = false;
  std::string upload_error_;
};

std::string_view to_string(JobResult r);

}  // namespace ringattn::serve
