// ringattn serve — the daemon's ring: formed through the library at start, kept up between
// jobs, re-formed whenever a peer dies or restarts, and drained on SIGTERM.
//
// Rank 0 coordinates: jobs submitted to it queue in order; for each, it sends every
// worker its shard as Ring messages (peer_messages.hpp), runs its own shard, and
// gathers O and lse. Workers wait for shards, run them and send back their rows. Every
// rank makes exactly one Ring::forward call per job, in the same order, so the ring's
// own checks (shapes on the wire, liveness, first cause) hold as in any embedding job.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ringattn/ring.hpp"
#include "../cli/json_object.hpp"
#include "../../infer/constrain/token_bytes.hpp"
#include "../../infer/job/load.hpp"
#include "generation.hpp"
#include "job.hpp"
#include "metrics.hpp"
#include "peer_messages.hpp"
#include "serve_config.hpp"
#include "sessions.hpp"

namespace ringattn::serve {

enum class RingState { forming, ready, running, draining, stopped };

// A model this daemon hosts: loaded from its own path at start (every daemon the same model:
// the ring refuses to form otherwise, naming both ranks and files).
struct HostedModel {
  infer::LoadedJob job;
  infer::JobOptions options;  // its configuration, threads and dtype for every batch
  std::string name;           // what the endpoint calls it (the file's stem)
  std::uint64_t digest = 0;   // job.digest(), once: what the ring compares when it forms
  // Each token's bytes, for constrained replies (structured output, forced tool calls).
  std::shared_ptr<const infer::constrain::TokenBytes> token_bytes;
};
std::string_view to_string(RingState s);

class RingService {
 public:
  // `control_address` and `metrics_address` are where clients reach this daemon (told to
  // the other daemons, for status and redirects). `notify` gets systemd's READY=1,
  // STATUS=... and STOPPING=1 lines.
  RingService(ServeConfig config, Metrics& metrics, std::string control_address, std::string metrics_address,
              std::function<void(const std::string&)> notify, std::shared_ptr<const HostedModel> model = nullptr);
  ~RingService();

  // Forms the ring and serves until stop() and the running job are done.
  void run();
  // Begins the drain (any thread, e.g. the signal thread): queued jobs are refused, the
  // running one finishes; after `grace` seconds it is aborted.
  void stop();
  // Aborts the running job `job_id` (its client went away): the ring breaks and re-forms.
  void abort_job(std::uint64_t job_id, const std::string& why);

  int rank() const { return config_.ring.rank; }
  int world() const { return config_.ring.world_size; }
  const RingLimits& limits() const { return config_.ring.limits; }
  DType wire_dtype() const { return config_.wire_dtype; }
  RingState state() const { return state_.load(); }
  // What /healthz says: "ok" while the ring is formed and every link is up (a rank that
  // left between jobs shows in the links before the next job fails on it), else why not.
  std::string health() const;

  // Rank 0: queue a job (events go to job->events). Throws Error while draining.
  void submit(std::shared_ptr<Job> job);
  std::uint64_t next_job_id() { return ++job_ids_; }
  // Rank 0 with a model: queue a generation; every request queued when the ring takes the
  // next one runs with it, packed into one batch. `open_session` starts a session on it,
  // `session` names the one it continues (sessions.hpp). Throws Refusal (draining, an
  // unknown or busy session, no room in the cache).
  void submit_generation(std::shared_ptr<Generation> g, bool open_session = false, const std::string& session = {});
  // Ends a session: its rows go on every rank with the next job, sent at once. Throws Refusal (404).
  void close_session(const std::string& id);
  const HostedModel* model() const { return model_.get(); }

  // Rank 0 with a model: the requests admitted and not ended, in the ring or waiting for it.
  struct Requests {
    std::int64_t running = 0, queued = 0;
  };
  Requests requests() const;
  // The ring's options: its token, TLS and timeout also ask the other daemons' control ports (ring_view.cpp).
  const RingOptions& ring_options() const { return config_.ring; }

  std::string status_json() const;  // this node, for `ringattn status`
  std::string nodes_json() const;   // every node's info as rank 0 collected it
  std::string coordinator_address() const;  // rank 0's control address, once known
  // Where this daemon's /metrics is, once bound ("off": none); before run().
  void set_metrics_address(std::string address);

 private:
  // Why a ring ended here: this daemon stops (the peers are told), a link failed, or rank 0
  // let a draining rank go (every rank knows: the ring re-forms without alarm).
  enum class Leave { stop, broken, released };
  void release(const std::vector<int>& leaving);  // rank 0
  bool form();
  void exchange_info();
  Leave coordinate();
  // coordinate()'s two kinds of work, each returning how the ring leaves, if it does.
  std::optional<Leave> coordinate_generations(std::unique_lock<std::mutex>& lock);  // lock held; released
  std::optional<Leave> coordinate_job(const std::shared_ptr<Job>& job);
  Leave work();
  void run_job(Job& job);
  // Continuous batching (rank 0, ring_generation.cpp): a round runs the running replies and
  // the newcomers that joined them, until every reply ends or newcomers wait (each reply
  // then pauses at the same step and goes on in the next round, with them).
  void run_generation(std::vector<std::shared_ptr<Generation>>& round, const std::vector<std::int32_t>& end);
  bool on_chosen(Generation& g, const infer::ChosenToken& c);  // a round's token sink
  void after_round(std::vector<std::shared_ptr<Generation>>& round, const std::vector<infer::SequenceResult>& results);
  void settle(Generation& g, const infer::SequenceResult* r);  // an ended reply; mu_ held
  void settle_paused();  // paused replies whose client left or whose text stopped; mu_ held
  void record_round(std::uint64_t id, const GenerateBatch& b, const infer::JobStats& st, const std::vector<infer::SequenceResult>& results,
                    double seconds);
  // Every rank: a GENERATE batch on the kept rows — its ended sessions erased, its prompts
  // run, its sessions' rows kept for their next message.
  std::vector<infer::SequenceResult> run_kept_batch(const GenerateBatch& b, infer::JobStats& st, const infer::TokenSink& sink,
                                                    const infer::LogitsHook& shape = {});
  void record_sessions();  // the sessions' gauges; mu_ held
  void run_worker_generation(std::uint64_t id);
  void agree_on_model();
  // The queued requests that join `running` replies in the next round, `prefilling` of whose
  // tokens are prompt chunks (a chunked prompt's next); mu_ held.
  std::vector<std::shared_ptr<Generation>> take_generations(std::size_t running, std::int64_t prefilling);
  ShardUpload upload_shards(Job& job, std::vector<ShardUpload>& sent, std::vector<MessageRequest>& sends);
  void gather_results(Job& job);
  void run_worker_job(std::uint64_t id, std::vector<std::byte>& buf);
  ForwardStats forward_job(std::uint64_t job_id, const JobRequest& q, std::span<const float> qrows,
                           const peer::Shard& shard, std::span<float> o, std::span<float> lse, EventQueue* events);
  void finish_job(Job& job, JobResult result, double seconds);
  void record_job(std::uint64_t id, JobResult result, double seconds, const std::string& shape, const std::string& error,
                  FailureCause cause);
  void record_transport();
  void set_state(RingState s);
  peer::NodeInfo node_info() const;                 // this daemon
  std::vector<cli::JsonObject> nodes_locked() const;  // nodes_json() with mu_ held

  ServeConfig config_;
  Metrics& metrics_;
  std::string control_address_, metrics_address_;
  std::function<void(const std::string&)> notify_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  std::atomic<RingState> state_{RingState::forming};
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> job_ids_{0};
  bool notified_ready_ = false;
  int formations_ = 0;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::unique_ptr<Ring> ring_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<const HostedModel> model_;
  std::deque<std::shared_ptr<Generation>> generations_;  // queued (rank 0)
  std::atomic<bool> arrived_{false};  // a request was queued since the round began (rank 0)
  // The ring thread's (rank 0): the replies paused between two rounds, the sequences the next
  // round erases on every rank (ended replies' rows no session keeps), and the round's state.
  std::vector<std::shared_ptr<Generation>> active_;
  std::vector<std::int32_t> to_erase_;
  int round_step_ = -1;
  bool pause_ = false;
  bool chunking_ = false;  // a prompt of the round goes in chunks: the round pauses at its first step
  std::int64_t round_generated_ = 0;
  std::unique_ptr<SessionTable> sessions_;               // rank 0 with a model
  KeptRows kept_;  // every rank with a model: the sessions' rows (ring thread only)
  std::uint64_t evicted_recorded_ = 0;  // sessions_->evicted() already counted in the metrics
  SessionTable::CacheFigures cache_recorded_;  // the prefix cache's counters already counted
  std::shared_ptr<Job> running_;
  std::uint64_t running_id_ = 0;  // the job a worker runs (0: none)
  std::condition_variable grace_cv_;
  std::thread grace_thread_;
  bool finished_ = false;  // run() returned: the grace thread has nothing to abort
  std::vector<peer::NodeInfo> nodes_;  // by rank, once the ring formed
  std::string coordinator_;
  std::optional<cli::JsonObject> last_job_;
  std::uint64_t jobs_ok_ = 0, jobs_failed_ = 0, jobs_aborted_ = 0;
  std::string last_ring_error_;
  std::uint64_t seen_sent_ = 0, seen_received_ = 0;  // transport counters already recorded
  std::map<int, std::pair<std::uint64_t, std::uint64_t>> seen_links_;  // per peer: sent, received recorded
};

}  // namespace ringattn::serve
