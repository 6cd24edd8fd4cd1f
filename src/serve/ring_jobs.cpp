// RingService's jobs: rank 0 coordinates (uploads the shards, runs its own forward,
// gathers the results, records the job), the workers run theirs; both on the ring's
// public message channel and Ring::forward (the lifecycle is in ring_service.cpp).
#include "ring_service.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include "../cli/log.hpp"
#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "../cli/json_object.hpp"
#include "peer_messages.hpp"
#include "service_events.hpp"

namespace ringattn::serve {
namespace {

cli::JsonObject node_json(const NodeResult& n) {
  cli::JsonObject o;
  o.add("rank", n.rank).add("rows", n.rows).add("seconds", n.seconds).add("compute_seconds", n.compute_seconds);
  o.add("wait_seconds", n.wait_seconds).add("useful_flops", n.useful_flops).add("steps", n.steps);
  o.add("steps_skipped", n.steps_skipped).add("bytes_sent", n.bytes_sent);
  return o;
}

// A shard's result as it travels and as the client gets it: per row, O then lse.
std::vector<float> interleave(std::span<const float> o, std::span<const float> lse, std::int64_t rows,
                              std::int64_t heads, std::int64_t head_dim) {
  const std::int64_t qw = heads * head_dim, w = qw + heads;
  std::vector<float> res(static_cast<std::size_t>(rows * w));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy_n(o.data() + r * qw, qw, res.data() + r * w);
    std::copy_n(lse.data() + r * heads, heads, res.data() + r * w + qw);
  }
  return res;
}

}  // namespace

RingService::Leave RingService::coordinate() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      // Ended sessions' and replies' rows go at once; running replies go on (a drain too).
      auto ended = [&] { return (sessions_ && sessions_->has_ended()) || !to_erase_.empty(); };
      cv_.wait_for(lock, std::chrono::milliseconds(100),
                   [&] { return !queue_.empty() || !generations_.empty() || !active_.empty() || ended() || stopping_; });
      if (stopping_ && active_.empty()) return Leave::stop;
      if (world() > 1) {
        if (std::string f = ring_->link_failure(); !f.empty()) {
          last_ring_error_ = f;
          return Leave::broken;
        }
        // A draining worker waits for leave: no job starts while one does (a job it has
        // not yet heard of would fail when it went). Queued work waits for the new ring.
        if (std::vector<int> leaving = ring_->leaving_ranks(); !leaving.empty()) {
          lock.unlock();
          try {
            release(leaving);
          } catch (const Error& e) {
            std::lock_guard relock(mu_);
            last_ring_error_ = e.what();
            return Leave::broken;
          }
          return Leave::released;
        }
      }
      if (sessions_) {
        sessions_->expire(Clock::now());
        record_sessions();
      }
      if (!generations_.empty() || !active_.empty() || ended()) {  // first: a person is reading them as they come
        if (const std::optional<Leave> leave = coordinate_generations(lock)) return *leave;
        continue;
      }
      if (queue_.empty()) continue;
      job = queue_.front();
      queue_.pop_front();
      metrics_.set("ringattn_jobs_queued", {}, static_cast<double>(queue_.size()));
      if (job->cancelled) {
        lock.unlock();
        job->error = "aborted: the client went away before the job started";
        finish_job(*job, JobResult::aborted, 0);
        continue;
      }
      running_ = job;
    }
    if (const std::optional<Leave> leave = coordinate_job(job)) return *leave;
  }
}

// One round of generation through the ring: the running replies, the newcomers that join
// them, and the rows of ended sessions and replies erased first.
std::optional<RingService::Leave> RingService::coordinate_generations(std::unique_lock<std::mutex>& lock) {
  settle_paused();
  std::vector<std::shared_ptr<Generation>> batch;
  for (auto& g : std::exchange(active_, {})) {
    const bool last_chunk = g->rest.empty() && !g->samples.empty();  // a chunked prompt's samples copy its whole rows now
    batch.push_back(g);
    if (!last_chunk) continue;
    for (auto& s : g->samples) batch.push_back(std::move(s));
    g->samples.clear();
  }
  std::int64_t prefilling = 0;  // a chunked prompt's next chunk: prompt tokens this round already feeds
  for (const auto& g : batch)
    if (g->feed.size() > 1) prefilling += static_cast<std::int64_t>(g->feed.size());
  for (auto& g : take_generations(batch.size(), prefilling)) batch.push_back(std::move(g));
  std::vector<std::int32_t> end = std::exchange(to_erase_, {});
  if (sessions_)
    for (const std::int32_t s : sessions_->take_ended()) end.push_back(s);
  lock.unlock();
  set_state(RingState::running);
  bool broken = false;
  try {
    run_generation(batch, end);
  } catch (const Error& e) {
    // Whatever failed, the ring re-forms: a rank that failed outside a ring call has left
    // the batch's calls (the others wait in theirs), and the kept rows may now differ
    // between ranks. The abort tells every rank at once rather than at its deadline.
    const auto* n = dynamic_cast<const NetworkError*>(&e);
    broken = true;
    last_ring_error_ = e.what();
    if (!ring_->broken()) ring_->abort(std::string("rank 0: generation failed: ") + e.what());
    double failed = 0;
    for (auto& g : batch)
      if (!g->ended) {
        g->ended = true;
        TokenEvent err = error_event(std::string("the ring failed: ") + e.what(), n ? 503 : 500);
        err.index = g->index;
        g->stream->push(std::move(err));
        ++failed;
      }
    std::lock_guard relock(mu_);
    for (auto& g : batch) sessions_->finish(*g, nullptr, false);
    active_.clear();
    to_erase_.clear();  // the ring re-forms: every kept row goes with it
    metrics_.add("ringattn_generations_total", {{"result", "failed"}}, failed);
  }
  {
    std::lock_guard relock(mu_);
    record_transport();
  }
  if (broken) return Leave::broken;
  set_state(stopping_ ? RingState::draining : RingState::ready);
  return std::nullopt;
}

// One attention job (running_) through the ring.
std::optional<RingService::Leave> RingService::coordinate_job(const std::shared_ptr<Job>& job) {
  set_state(RingState::running);
  const auto t0 = Clock::now();
  bool broken = false;
  JobResult result = JobResult::ok;
  try {
    run_job(*job);
  } catch (const Error& e) {
    const auto* n = dynamic_cast<const NetworkError*>(&e);
    job->error = e.what();
    job->cause = n ? n->cause() : FailureCause::local;
    job->origin_rank = n ? n->origin_rank() : 0;
    broken = ring_->broken() || n != nullptr;
    if (broken) last_ring_error_ = e.what();
    result = job->cancelled ? JobResult::aborted : JobResult::failed;
  }
  // No longer running before its client hears "done": a client that then leaves (while its
  // result rows are still being sent) must not abort the ring, which has no job any more.
  {
    std::lock_guard lock(mu_);
    running_.reset();
    record_transport();
  }
  finish_job(*job, result, since(t0));
  if (broken) return Leave::broken;
  set_state(stopping_ ? RingState::draining : RingState::ready);
  return std::nullopt;
}

// One Ring::forward of a job on this rank, its steps timed (and, with `events`, told to
// the client). A shape this rank refuses fails the ring: the others are already in the call.
ForwardStats RingService::forward_job(std::uint64_t job_id, const JobRequest& q, std::span<const float> qrows,
                                      const peer::Shard& shard, std::span<float> o, std::span<float> lse,
                                      EventQueue* events) {
  auto last_step = Clock::now();
  ring_->on_step([&](int step) {
    const auto now = Clock::now();
    if (step > 0) metrics_.observe("ringattn_step_seconds", {}, std::chrono::duration<double>(now - last_step).count());
    last_step = now;
    if (!events) return;
    cli::JsonObject e;
    e.add("rank", rank()).add("step", step + 1).add("of", world());
    events->push(event("step", e));
  });
  struct Off {
    Ring& ring;
    ~Off() { ring.on_step({}); }
  } off{*ring_};
  ForwardStats st;
  try {
    st = ring_->forward({q.spec(), qrows, shard.k, shard.v, shard.positions}, o, lse);
  } catch (const InvalidArgument& e) {
    ring_->abort("rank " + std::to_string(rank()) + " refused job " + std::to_string(job_id) + ": " + e.what());
    throw;
  }
  metrics_.observe("ringattn_step_seconds", {}, std::chrono::duration<double>(Clock::now() - last_step).count());
  return st;
}

// Rank 0: the client's shards (the workers' first), then each worker's forwarded (its
// sends stay in `sends`, their payloads in `sent`); returns rank 0's own. Nothing goes to a
// worker before the whole upload is in: a worker that had its shard would start its
// forward and wait on rank 0, which is not in the ring call while a (slow) client is still
// sending, and the ring would time out on a request's upload speed.
ShardUpload RingService::upload_shards(Job& job, std::vector<ShardUpload>& sent, std::vector<MessageRequest>& sends) {
  const int P = world();
  sent.reserve(static_cast<std::size_t>(P));
  std::optional<ShardUpload> own;
  for (int i = 0; i < P; ++i) {
    std::optional<ShardUpload> u = job.next_upload();
    if (!u) {
      const std::string refused = job.upload_error();
      job.cancelled = true;
      throw Error("job " + std::to_string(job.id) + " aborted: " +
                  (refused.empty() ? "its client went away during the upload" : "its upload was refused: " + refused));
    }
    if (u->rank == 0)
      own = std::move(u);
    else
      sent.push_back(std::move(*u));
  }
  static constexpr std::byte kAttention[1] = {static_cast<std::byte>(peer::JobKind::attention)};
  for (const ShardUpload& x : sent) {
    sends.push_back(ring_->send_message(x.rank, static_cast<std::uint32_t>(peer::Msg::job), job.id, kAttention));
    sends.push_back(ring_->send_message(x.rank, static_cast<std::uint32_t>(peer::Msg::shard), job.id, x.kv));
    sends.push_back(ring_->send_message(x.rank, static_cast<std::uint32_t>(peer::Msg::query), job.id, x.q));
  }
  return std::move(*own);
}

// Rank 0: every worker's RESULT and STATS, rank by rank, into the job.
void RingService::gather_results(Job& job) {
  const JobRequest& q = job.request;
  const std::int64_t w = q.heads * q.head_dim + q.heads;
  std::vector<std::byte> stats;
  for (int r = 1; r < world(); ++r) {
    auto& res = job.results[static_cast<std::size_t>(r)];
    res.resize(static_cast<std::size_t>(shard_positions(q.layout, q.tokens, world(), r).size() * w));
    peer::receive_into(*ring_, r, peer::Msg::result, job.id, std::as_writable_bytes(std::span(res)));
    peer::receive(*ring_, r, peer::Msg::stats, job.id, stats);
    NodeResult n = peer::decode_stats(stats, r);
    job.nodes.push_back(n);
    job.events->push(event("node_done", node_json(n)));
  }
}

// One job on rank 0: ask the client for the shards (workers' first), forward the workers'
// once all are in, run rank 0's own, gather every rank's rows of O and lse.
void RingService::run_job(Job& job) {
  const JobRequest& q = job.request;
  const int P = world();
  const auto t_begin = Clock::now();
  {
    cli::JsonObject e;
    e.add("job", job.id).add("world", P).add("layout", to_string(q.layout));
    job.events->push(event("upload", e));
  }
  std::vector<ShardUpload> sent;  // alive until their sends complete
  std::vector<MessageRequest> sends;
  ShardUpload own = upload_shards(job, sent, sends);
  const auto t_uploaded = Clock::now();
  const std::int64_t rows = static_cast<std::int64_t>(own.q.size() / 4 / static_cast<std::size_t>(q.heads * q.head_dim));
  const peer::Shard mine = peer::shard_view(own.kv, q, rows);
  const auto q0 = peer::query_rows(own.q);
  std::vector<float> o0(q0.size()), lse0(static_cast<std::size_t>(rows * q.heads));
  {
    cli::JsonObject e;
    e.add("job", job.id).add("ranks", P).add("shape", q.describe());
    job.events->push(event("started", e));
  }
  const ForwardStats st = forward_job(job.id, q, q0, mine, o0, lse0, job.events.get());
  const auto t_forward = Clock::now();
  job.results.assign(static_cast<std::size_t>(P), {});
  job.results[0] = interleave(o0, lse0, rows, q.heads, q.head_dim);
  NodeResult me{0, rows, st.seconds, st.compute_seconds, st.wait_seconds, st.useful_flops, st.steps, st.steps_skipped,
                st.bytes_sent};
  job.nodes = {me};
  job.events->push(event("node_done", node_json(me)));
  for (auto& s : sends) ring_->wait(s);
  sent.clear();
  gather_results(job);
  // Every result is in: the workers may go on (or leave, when draining). The job is
  // complete here whatever follows: a draining worker may leave (and break the ring) as
  // soon as its DONE is out, so a failure now ends the ring, not this job.
  try {
    std::vector<MessageRequest> dones;
    for (int r = 1; r < P; ++r)
      dones.push_back(ring_->send_message(r, static_cast<std::uint32_t>(peer::Msg::done), job.id, {}));
    for (auto& d : dones) ring_->wait(d);
  } catch (const NetworkError& e) {
    cli::logger("serve")->info("job {}: every result is in; the ring ended after it: {}", job.id, e.what());
  }
  cli::logger("serve")->debug("job {} phases: upload {:.1f} ms, rank 0's forward {:.1f} ms, the workers' results {:.1f} ms later",
                         job.id, std::chrono::duration<double, std::milli>(t_uploaded - t_begin).count(),
                         std::chrono::duration<double, std::milli>(t_forward - t_uploaded).count(),
                         std::chrono::duration<double, std::milli>(Clock::now() - t_forward).count());
  job.ring_seconds = 0;
  for (const auto& n : job.nodes) {
    job.ring_seconds = std::max(job.ring_seconds, n.seconds);
    metrics_.add("ringattn_useful_flops_total", {}, n.useful_flops);
  }
  metrics_.add("ringattn_exposed_wait_seconds_total", {}, st.wait_seconds);
  metrics_.add("ringattn_compute_seconds_total", {}, st.compute_seconds);
}

// A job's end on this rank, in the metrics and in what `status` shows (rank 0 and workers).
void RingService::record_job(std::uint64_t id, JobResult result, double seconds, const std::string& shape,
                             const std::string& error, FailureCause cause) {
  metrics_.add("ringattn_jobs_total", {{"result", std::string(to_string(result))}});
  if (result != JobResult::ok) metrics_.add("ringattn_job_failures_total", {{"cause", std::string(to_string(cause))}});
  if (result == JobResult::ok) metrics_.observe("ringattn_job_seconds", {}, seconds);
  cli::JsonObject last;
  last.add("id", id).add("result", to_string(result)).add("seconds", seconds);
  if (!shape.empty()) last.add("shape", shape);
  if (!error.empty()) last.add("error", error);
  std::lock_guard lock(mu_);
  last_job_ = last;
  (result == JobResult::ok ? jobs_ok_ : result == JobResult::failed ? jobs_failed_ : jobs_aborted_)++;
}

void RingService::finish_job(Job& job, JobResult result, double seconds) {
  job.result = result;
  job.job_seconds = seconds;
  record_job(job.id, result, seconds, job.request.describe(), job.error, job.cause);
  if (result == JobResult::ok) {
    cli::logger("serve")->info("job {} done: {} in {:.3f} s (ring {:.3f} s)", job.id, job.request.describe(), seconds,
                          job.ring_seconds);
    cli::JsonObject e;
    e.add("job", job.id).add("seconds", seconds).add("ring_seconds", job.ring_seconds).add("nodes", [&] {
      std::vector<cli::JsonObject> v;
      for (const auto& n : job.nodes) v.push_back(node_json(n));
      return v;
    }());
    job.events->push(event("done", e));
  } else {
    // The reason without its own "job N aborted: " (the line and the client add theirs).
    std::string message = job.error;
    const std::string prefix = "job " + std::to_string(job.id) + " " + std::string(to_string(result)) + ": ";
    if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
    cli::logger("serve")->warn("job {} {}: {}", job.id, to_string(result), message);
    cli::JsonObject e;
    e.add("job", job.id).add("result", to_string(result)).add("message", message);
    e.add("cause", to_string(job.cause)).add("rank", job.origin_rank);
    job.events->push(event("error", e));
  }
  job.events->close();
}

// Rank 0, between jobs: the `leaving` ranks asked to leave (a drain). RELEASE to every
// worker ends this ring: the leaving ones go, the others re-form with rank 0 and wait
// for them (or their replacements) to come back.
void RingService::release(const std::vector<int>& leaving) {
  std::string who;
  for (int r : leaving) who += (who.empty() ? "" : ", ") + std::to_string(r);
  cli::logger("serve")->info("rank{} {} asked to leave (draining): releasing the ring; it re-forms when {} back",
                             leaving.size() > 1 ? "s" : "", who, leaving.size() > 1 ? "they are" : "it is");
  static constexpr std::byte kRelease[1] = {static_cast<std::byte>(peer::JobKind::release)};
  std::vector<MessageRequest> sends;
  for (int r = 1; r < world(); ++r)
    sends.push_back(ring_->send_message(r, static_cast<std::uint32_t>(peer::Msg::job), 0, kRelease));
  for (auto& s : sends) ring_->wait(s);
}

// A worker: wait for the next job from rank 0 (polling, so that an idle ring is not
// mistaken for a stalled one and a drain is noticed), run it, send the rows back.
RingService::Leave RingService::work() {
  std::optional<Clock::time_point> leave_by;  // draining: leave by then even unreleased
  for (;;) {
    std::vector<std::byte> buf;
    std::byte kind{};
    MessageRequest req = ring_->receive_message(0, static_cast<std::uint32_t>(peer::Msg::job),
                                                [&](const MessageHeader& h) {
                                                  return h.bytes == 1 ? std::span<std::byte>(&kind, 1) : std::span<std::byte>();
                                                });
    // No timed wait: poll, quickly at first (a job's shard is usually on its way when the
    // last job ends), backing off to 1 ms when idle (a request waits at most that for an idle worker:
    // 1000 wake-ups a second cost an idle daemon about 0.1 % of a core).
    // Draining: ask rank 0 to let this rank go and keep taking jobs until it does (a job
    // rank 0 sent before it heard is run and delivered). Rank 0 answers between jobs; if it
    // does not within the grace period, leave anyway.
    for (auto nap = std::chrono::microseconds(200); !ring_->ready(req);
         nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1))) {
      if (stopping_ && !leave_by) {
        leave_by = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.grace));
        ring_->announce_leaving();
        cli::logger("serve")->info("draining: asked rank 0 to let rank {} leave the ring", rank());
      } else if (leave_by && (Clock::now() >= *leave_by || !ring_->link_failure().empty())) {
        // Before the posted receive is dropped: a JOB arriving now fails the ring with this
        // reason, not as a frame nobody wanted.
        ring_->abort("rank " + std::to_string(rank()) + " is shutting down: rank 0 did not let it leave within " +
                         std::to_string(static_cast<int>(config_.grace)) + " s",
                     FailureCause::peer_closed);
        return Leave::stop;
      }
      std::this_thread::sleep_for(nap);
    }
    std::uint64_t id = 0;
    try {
      id = ring_->wait(req).job;
      if (kind == static_cast<std::byte>(peer::JobKind::release)) {
        if (!stopping_) cli::logger("serve")->info("rank 0 released the ring: a rank is leaving");
        return Leave::released;
      }
      if (kind == static_cast<std::byte>(peer::JobKind::generation)) {
        run_worker_generation(id);
      } else if (kind == static_cast<std::byte>(peer::JobKind::attention)) {
        peer::receive(*ring_, 0, peer::Msg::shard, id, buf);
        run_worker_job(id, buf);
      } else {
        throw NetworkError("rank 0 sent job " + std::to_string(id) + " of an unknown kind " +
                               std::to_string(static_cast<int>(kind)),
                           FailureCause::protocol, 0);
      }
    } catch (const Error& e) {
      {
        std::lock_guard lock(mu_);
        last_ring_error_ = e.what();
        running_id_ = 0;
      }
      // A failure of this rank's own (a batch it refused, say) ends the job everywhere now,
      // not when rank 0 next sends to a rank that has gone.
      if (!ring_->broken()) ring_->abort("rank " + std::to_string(rank()) + ": " + e.what());
      if (id != 0) {
        const auto* n = dynamic_cast<const NetworkError*>(&e);
        record_job(id, JobResult::failed, 0, "", e.what(), n ? n->cause() : FailureCause::local);
      }
      return Leave::broken;
    }
  }
}

// A worker's job `id`: its SHARD in `buf`; then its QUERY, the forward, RESULT and STATS
// back, and rank 0's DONE.
void RingService::run_worker_job(std::uint64_t id, std::vector<std::byte>& buf) {
  const peer::Shard s = peer::decode_shard(buf, world(), ring_->limits());  // spans into buf
  const JobRequest& q = s.request;
  const std::int64_t rows = static_cast<std::int64_t>(s.positions.size());
  std::vector<float> qrows(static_cast<std::size_t>(rows * q.heads * q.head_dim));
  peer::receive_into(*ring_, 0, peer::Msg::query, id, std::as_writable_bytes(std::span(qrows)));
  {
    std::lock_guard lock(mu_);
    running_id_ = id;
  }
  set_state(RingState::running);
  std::vector<float> o(qrows.size()), lse(static_cast<std::size_t>(rows * q.heads));
  const ForwardStats st = forward_job(id, q, qrows, s, o, lse, nullptr);
  const std::vector<float> res = interleave(o, lse, rows, q.heads, q.head_dim);
  const NodeResult me{rank(), rows, st.seconds, st.compute_seconds, st.wait_seconds, st.useful_flops, st.steps,
                      st.steps_skipped, st.bytes_sent};
  const auto stats = peer::encode_stats(me);
  MessageRequest a = ring_->send_message(0, static_cast<std::uint32_t>(peer::Msg::result), id, std::as_bytes(std::span(res)));
  MessageRequest b = ring_->send_message(0, static_cast<std::uint32_t>(peer::Msg::stats), id, stats);
  ring_->wait(a);
  ring_->wait(b);
  // Rank 0 has every rank's result once it says so (peer_messages.hpp, DONE): only then
  // may a draining worker leave, its leaving announced around the ring.
  peer::receive_into(*ring_, 0, peer::Msg::done, id, {});
  metrics_.add("ringattn_exposed_wait_seconds_total", {}, st.wait_seconds);
  metrics_.add("ringattn_compute_seconds_total", {}, st.compute_seconds);
  metrics_.add("ringattn_useful_flops_total", {}, st.useful_flops);
  record_job(id, JobResult::ok, st.seconds, q.describe(), "", FailureCause::unknown);
  {
    std::lock_guard lock(mu_);
    running_id_ = 0;
    record_transport();
  }
  cli::logger("serve")->info("job {}: my {} rows in {:.3f} s", id, rows, st.seconds);
  set_state(stopping_ ? RingState::draining : RingState::ready);
}

}  // namespace ringattn::serve
