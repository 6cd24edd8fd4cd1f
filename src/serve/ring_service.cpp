#include "src/serve/ring_service.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <thread>

#include "core/logger.hpp"
#include "net/transport.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn_config.h"
#include "src/cli/json_object.hpp"
#include "src/cli/json_value.hpp"
#include "ring/internals.hpp"
#include "src/serve/peer_messages.hpp"

namespace ringattn::serve {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

cli::JsonObject node_json(const NodeResult& n) {
  cli::JsonObject o;
  o.add("rank", n.rank).add("rows", n.rows).add("seconds", n.seconds).add("compute_seconds", n.compute_seconds);
  o.add("wait_seconds", n.wait_seconds).add("useful_flops", n.useful_flops).add("steps", n.steps);
  o.add("steps_skipped", n.steps_skipped).add("bytes_sent", n.bytes_sent);
  return o;
}

// Events to the client: one JSON object each.
std::string event(const char* name, cli::JsonObject body = {}) {
  cli::JsonObject o;
  o.add("event", name).add("data", body);
  return o.str();
}

}  // namespace

std::string_view to_string(RingState s) {
  switch (s) {
    case RingState::forming: return "forming";
    case RingState::ready: return "ready";
    case RingState::running: return "running";
    case RingState::draining: return "draining";
    case RingState::stopped: return "stopped";
  }
  return "?";
}

RingService::RingService(ServeConfig config, Metrics& metrics, std::string control_address, std::string metrics_address,
                         std::function<void(const std::string&)> notify)
    : config_(std::move(config)),
      metrics_(metrics),
      control_address_(std::move(control_address)),
      metrics_address_(std::move(metrics_address)),
      notify_(std::move(notify)) {
  if (rank() == 0) coordinator_ = control_address_;
  set_state(RingState::forming);
}

RingService::~RingService() {
  {
    std::lock_guard lock(mu_);
    finished_ = true;
  }
  grace_cv_.notify_all();
  if (grace_thread_.joinable()) grace_thread_.join();
}

void RingService::set_state(RingState s) {
  state_ = s;
  for (RingState x : {RingState::forming, RingState::ready, RingState::running, RingState::draining, RingState::stopped})
    metrics_.set("ringattn_ring_state", {{"state", std::string(to_string(x))}}, x == s ? 1 : 0);
}

std::string RingService::info_json() const {
  cli::JsonObject o;
  o.add("rank", rank()).add("host", hostname()).add("control", control_address_).add("metrics", metrics_address_);
  o.add("version", RINGATTN_VERSION).add("isa", to_string(config_.ring.isa.value_or(default_isa())));
  o.add("threads", config_.ring.threads);
  return o.str();
}

void RingService::stop() {
  if (stopping_.exchange(true)) return;
  if (notify_) notify_("STOPPING=1");
  cv_.notify_all();
  // The grace period: a job still running when it ends is aborted (its client is told).
  grace_thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    if (grace_cv_.wait_for(lock, std::chrono::duration<double>(config_.grace), [&] { return finished_; })) return;
    if (ring_ && (running_ || running_id_ != 0)) {
      logger("serve")->warn("grace period of {:.0f} s over: aborting the running job", config_.grace);
      RingInternals::transport(*ring_).abort(FailureCause::local, rank(),
                                             "rank " + std::to_string(rank()) + " is shutting down: the job was aborted "
                                             "after the grace period");
    }
  });
}

void RingService::abort_job(std::uint64_t job_id, const std::string& why) {
  std::lock_guard lock(mu_);
  for (auto it = queue_.begin(); it != queue_.end(); ++it)
    if ((*it)->id == job_id) {  // not started: just drop it
      (*it)->cancelled = true;
      return;
    }
  if (running_ && running_->id == job_id && ring_) {
    running_->cancelled = true;
    RingInternals::transport(*ring_).abort(FailureCause::local, 0, "job " + std::to_string(job_id) + " aborted: " + why);
  }
}

void RingService::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw Error("rank 0 is shutting down and takes no more jobs; submit again once it is back");
    queue_.push_back(job);
    metrics_.set("ringattn_jobs_queued", {}, static_cast<double>(queue_.size()));
    // Queued before the ring thread can start it: the client sees the events in order.
    cli::JsonObject e;
    e.add("job", job->id).add("position", static_cast<std::int64_t>(queue_.size() + (running_ ? 1 : 0)));
    e.add("ring", to_string(state())).add("dtype", to_string(job->request.dtype));
    job->events->push(event("queued", e));
  }
  cv_.notify_all();
}

std::string RingService::coordinator_address() const {
  std::lock_guard lock(mu_);
  return coordinator_;
}

std::string RingService::nodes_json() const {
  std::lock_guard lock(mu_);
  return nodes_locked();
}

std::string RingService::nodes_locked() const {
  return nodes_json_ == "[]" ? "[" + info_json() + "]" : nodes_json_;  // before the ring formed: this node
}

std::string RingService::status_json() const {
  std::lock_guard lock(mu_);
  cli::JsonObject o;
  o.add("rank", rank()).add("world_size", world()).add("version", RINGATTN_VERSION);
  o.add("isa", to_string(config_.ring.isa.value_or(default_isa()))).add("threads", config_.ring.threads);
  o.add("host", hostname()).add("state", to_string(state())).add("uptime_seconds", since(started_));
  o.add("control", control_address_).add("metrics", metrics_address_);
  o.add("ring", config_.ring.master.empty() ? "peers" : "master " + config_.ring.master);
  o.add("formations", formations_).add("last_ring_error", last_ring_error_);
  o.add("jobs_ok", jobs_ok_).add("jobs_failed", jobs_failed_).add("jobs_aborted", jobs_aborted_);
  o.add("queued", static_cast<std::int64_t>(queue_.size()));
  std::string s = o.str();
  s.pop_back();
  return s + ",\"nodes\":" + nodes_locked() + ",\"last_job\":" + last_job_ + "}";
}

// ---- forming ----------------------------------------------------------------------

bool RingService::form() {
  set_state(stopping_ ? RingState::draining : RingState::forming);
  auto log = logger("serve");
  std::string last;
  double backoff = 0.2;
  while (!stopping_) {
    if (notify_) notify_("STATUS=forming the ring (" + std::to_string(world()) + " daemons)");
    try {
      auto ring = std::make_unique<Ring>(Ring::connect(config_.ring));
      {
        std::lock_guard lock(mu_);
        ring_ = std::move(ring);
        seen_sent_ = seen_received_ = 0;
      }
      exchange_info();
      ++formations_;
      metrics_.add("ringattn_ring_formations_total");
      log->info("ring formed: {} daemons{}", world(), formations_ > 1 ? " (re-formed)" : "");
      set_state(RingState::ready);
      if (notify_) {
        notify_(notified_ready_ ? "STATUS=ring ready" : "READY=1\nSTATUS=ring ready");
        notified_ready_ = true;
      }
      return true;
    } catch (const Error& e) {
      std::lock_guard lock(mu_);
      if (ring_) ring_->close();
      ring_.reset();
      last_ring_error_ = e.what();
      if (last != e.what()) log->warn("ring not formed yet: {} (retrying)", e.what());
      last = e.what();
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(2.0, backoff * 2);
  }
  return false;
}

// Every worker tells rank 0 who it is; rank 0 tells everyone the table (for `status`
// and for redirecting clients to rank 0).
void RingService::exchange_info() {
  if (world() == 1) return;
  auto& t = RingInternals::transport(*ring_);
  const RingLimits& l = ring_->limits();
  auto recv_text = [&](int from) {
    std::vector<std::byte> buf;
    net::Request r = t.irecv(from, [&](const net::FrameHeader& h) -> std::span<std::byte> {
      if (h.kind != net::FrameKind::state) return {};
      buf.resize(h.payload_bytes);
      return buf;
    });
    const auto h = t.wait(r);
    if (h.step != (rank() == 0 ? peer::kInfo : peer::kTable))
      throw NetworkError("rank " + std::to_string(from) + " sent something else than its node info", FailureCause::protocol, from);
    return peer::frame_text(buf);
  };
  if (rank() == 0) {
    std::string table = "[" + info_json();
    for (int r = 1; r < world(); ++r) table += "," + recv_text(r);
    table += "]";
    cli::parse_json(table);  // each worker's text must be JSON
    auto f = peer::text_frame(table, peer::kTable, l);
    std::vector<net::Request> sends;
    for (int r = 1; r < world(); ++r) sends.push_back(t.isend(r, f.header, f.payload));
    for (auto& s : sends) t.wait(s);
    std::lock_guard lock(mu_);
    nodes_json_ = table;
  } else {
    auto f = peer::text_frame(info_json(), peer::kInfo, l);
    net::Request s = t.isend(0, f.header, f.payload);
    t.wait(s);
    const std::string table = recv_text(0);
    const cli::JsonValue v = cli::parse_json(table);
    std::lock_guard lock(mu_);
    nodes_json_ = table;
    if (v.kind == cli::JsonValue::Kind::array && !v.items.empty())
      if (const auto* c = v.items[0].get("control"); c && c->kind == cli::JsonValue::Kind::string) coordinator_ = c->string;
  }
}

// ---- serving ----------------------------------------------------------------------

void RingService::run() {
  while (!stopping_) {
    if (!form()) break;
    const Leave why = rank() == 0 ? coordinate() : work();
    std::lock_guard lock(mu_);
    record_transport();
    if (ring_ && why == Leave::stop && world() > 1 && !ring_->broken())  // tell the others now, not at their next job
      RingInternals::transport(*ring_).abort(FailureCause::peer_closed, rank(),
                                             "rank " + std::to_string(rank()) + " is shutting down");
    if (ring_) ring_->close();
    ring_.reset();
    if (why == Leave::broken) {
      metrics_.add("ringattn_ring_failures_total");
      logger("serve")->warn("the ring broke{}; re-forming", last_ring_error_.empty() ? "" : ": " + last_ring_error_);
    }
  }
  set_state(RingState::stopped);
  {
    std::lock_guard lock(mu_);
    finished_ = true;
  }
  grace_cv_.notify_all();
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard lock(mu_);
    left.swap(queue_);
  }
  for (auto& j : left) {
    j->error = "rank 0 shut down before the job started; submit it again once the daemons are back";
    j->cause = FailureCause::local;
    finish_job(*j, JobResult::aborted, 0);
  }
}

void RingService::record_transport() {
  if (!ring_) return;
  const auto s = RingInternals::transport_stats(*ring_);
  metrics_.add("ringattn_bytes_sent_total", {}, static_cast<double>(s.bytes_sent - seen_sent_));
  metrics_.add("ringattn_bytes_received_total", {}, static_cast<double>(s.bytes_received - seen_received_));
  seen_sent_ = s.bytes_sent;
  seen_received_ = s.bytes_received;
}

RingService::Leave RingService::coordinate() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return !queue_.empty() || stopping_; });
      if (stopping_) return Leave::stop;
      if (world() > 1) {
        if (std::string f = RingInternals::transport(*ring_).failure(); !f.empty()) {
          last_ring_error_ = f;
          return Leave::broken;
        }
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
    set_state(RingState::running);
    const auto t0 = Clock::now();
    bool broken = false;
    try {
      run_job(*job);
      finish_job(*job, JobResult::ok, since(t0));
    } catch (const Error& e) {
      const auto* n = dynamic_cast<const NetworkError*>(&e);
      job->error = e.what();
      job->cause = n ? n->cause() : FailureCause::local;
      job->origin_rank = n ? n->origin_rank() : 0;
      broken = ring_->broken() || n != nullptr;
      if (broken) last_ring_error_ = e.what();
      finish_job(*job, job->cancelled ? JobResult::aborted : JobResult::failed, since(t0));
    }
    {
      std::lock_guard lock(mu_);
      running_.reset();
      record_transport();
    }
    if (broken) return Leave::broken;
    set_state(stopping_ ? RingState::draining : RingState::ready);
  }
}

// One job on rank 0: ask the client for the shards (workers' first), forward each worker's
// as it arrives, run rank 0's own, gather every rank's rows of O and lse.
void RingService::run_job(Job& job) {
  const JobRequest& q = job.request;
  const int P = world();
  auto& t = RingInternals::transport(*ring_);
  const auto t_begin = Clock::now();
  {
    cli::JsonObject e;
    e.add("job", job.id).add("world", P).add("layout", to_string(q.layout));
    job.events->push(event("upload", e));
  }
  std::vector<ShardUpload> sent;  // alive until their sends complete
  std::vector<net::Request> sends;
  sent.reserve(static_cast<std::size_t>(P));
  std::optional<ShardUpload> own;
  for (int i = 0; i < P; ++i) {
    std::optional<ShardUpload> u = job.next_upload();
    if (!u) {
      const std::string refused = job.upload_error();
      const std::string why = "job " + std::to_string(job.id) + " aborted: " +
                              (refused.empty() ? "its client went away during the upload" : "its upload was refused: " + refused);
      if (!sends.empty()) t.abort(FailureCause::local, 0, why);  // workers hold half a job: start over
      job.cancelled = true;
      throw Error(why);
    }
    if (u->rank == 0) {
      own = std::move(u);
      continue;
    }
    const std::int64_t rows = shard_positions(q.layout, q.tokens, P, u->rank).size();
    sent.push_back(std::move(*u));
    sends.push_back(t.isend(sent.back().rank, peer::shard_header(job.id, q, rows), sent.back().kv));
    sends.push_back(t.isend(sent.back().rank, peer::query_header(job.id, q, rows), sent.back().q));
  }
  const auto t_uploaded = Clock::now();
  const std::int64_t rows = static_cast<std::int64_t>(own->q.size() / 4 / static_cast<std::size_t>(q.heads * q.head_dim));
  const peer::Shard mine = peer::shard_view(own->kv, q, rows);
  const auto q0 = peer::query_rows(own->q);
  const std::int64_t qw = q.heads * q.head_dim, w = qw + q.heads;
  std::vector<float> o0(q0.size()), lse0(static_cast<std::size_t>(rows * q.heads));
  {
    cli::JsonObject e;
    e.add("job", job.id).add("ranks", P).add("shape", q.describe());
    job.events->push(event("started", e));
  }
  auto last_step = Clock::now();
  RingInternals::set_step_hook(*ring_, [&](int step, std::span<std::byte>, std::atomic<std::uint64_t>&) {
    const auto now = Clock::now();
    if (step > 0) metrics_.observe("ringattn_step_seconds", {}, std::chrono::duration<double>(now - last_step).count());
    last_step = now;
    cli::JsonObject e;
    e.add("rank", 0).add("step", step + 1).add("of", P);
    job.events->push(event("step", e));
  });
  ForwardStats st;
  try {
    st = ring_->forward(q.spec(), q0, mine.k, mine.v, mine.positions, o0, lse0);
  } catch (const InvalidArgument& e) {  // the others are already running: tell them
    RingInternals::set_step_hook(*ring_, {});
    t.abort(FailureCause::local, 0, std::string("rank 0 refused the job: ") + e.what());
    throw;
  } catch (...) {
    RingInternals::set_step_hook(*ring_, {});
    throw;
  }
  RingInternals::set_step_hook(*ring_, {});
  metrics_.observe("ringattn_step_seconds", {}, std::chrono::duration<double>(Clock::now() - last_step).count());
  const auto t_forward = Clock::now();

  job.results.assign(static_cast<std::size_t>(P), {});
  auto& r0 = job.results[0];
  r0.resize(static_cast<std::size_t>(rows * w));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy_n(o0.data() + r * qw, qw, r0.data() + r * w);
    std::copy_n(lse0.data() + r * q.heads, q.heads, r0.data() + r * w + qw);
  }
  NodeResult me{0, rows, st.seconds, st.compute_seconds, st.wait_seconds, st.useful_flops, st.steps, st.steps_skipped,
                st.bytes_sent};
  job.nodes = {me};
  job.events->push(event("node_done", node_json(me)));
  for (auto& s : sends) t.wait(s);
  sent.clear();
  for (int r = 1; r < P; ++r) {
    auto& res = job.results[static_cast<std::size_t>(r)];
    res.resize(static_cast<std::size_t>(shard_positions(q.layout, q.tokens, P, r).size() * w));
    std::vector<std::byte> stats(64);
    net::Request a = t.irecv(r, std::as_writable_bytes(std::span(res)));
    net::Request b = t.irecv(r, stats);
    const auto ha = t.wait(a);
    const auto hb = t.wait(b);
    if (ha.step != peer::kResult || hb.step != peer::kStats || ha.job_id != job.id || ha.cols != static_cast<std::uint32_t>(w))
      throw NetworkError("rank " + std::to_string(r) + " sent a result that is not job " + std::to_string(job.id) + "'s",
                         FailureCause::protocol, r);
    NodeResult n = peer::decode_stats(stats, r);
    job.nodes.push_back(n);
    job.events->push(event("node_done", node_json(n)));
  }
  // Every result is in: the workers may go on (or leave, when draining).
  // The job is complete here whatever follows: a draining worker may leave (and break the
  // ring) as soon as its DONE is out, so a failure now ends the ring, not this job.
  const std::array<float, 1> done_payload{};
  try {
    std::vector<net::Request> dones;
    for (int r = 1; r < P; ++r) {
      net::FrameHeader hd;
      hd.kind = net::FrameKind::state;
      hd.job_id = job.id;
      hd.step = peer::kDone;
      hd.rows = 1;
      hd.cols = 1;
      dones.push_back(t.isend(r, hd, std::as_bytes(std::span(done_payload))));
    }
    for (auto& d : dones) t.wait(d);
  } catch (const NetworkError& e) {
    logger("serve")->info("job {}: every result is in; the ring ended after it: {}", job.id, e.what());
  }
  logger("serve")->debug("job {} phases: upload {:.1f} ms, rank 0's forward {:.1f} ms, the workers' results {:.1f} ms later",
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
  last_job_ = last.str();
  (result == JobResult::ok ? jobs_ok_ : result == JobResult::failed ? jobs_failed_ : jobs_aborted_)++;
}

void RingService::finish_job(Job& job, JobResult result, double seconds) {
  job.result = result;
  job.job_seconds = seconds;
  record_job(job.id, result, seconds, job.request.describe(), job.error, job.cause);
  if (result == JobResult::ok) {
    logger("serve")->info("job {} done: {} in {:.3f} s (ring {:.3f} s)", job.id, job.request.describe(), seconds,
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
    logger("serve")->warn("job {} {}: {}", job.id, to_string(result), message);
    cli::JsonObject e;
    e.add("job", job.id).add("result", to_string(result)).add("message", message);
    e.add("cause", to_string(job.cause)).add("rank", job.origin_rank);
    job.events->push(event("error", e));
  }
  job.events->close();
}

// A worker: wait for shards from rank 0 (polling, so that an idle ring is not mistaken
// for a stalled one and a drain is noticed), run them, send the rows back.
RingService::Leave RingService::work() {
  auto& t = RingInternals::transport(*ring_);
  for (;;) {
    std::vector<std::byte> buf;
    net::Request req = t.irecv(0, [&](const net::FrameHeader& h) -> std::span<std::byte> {
      if (h.kind != net::FrameKind::kv_block || h.step != peer::kShard) return {};
      buf.resize(h.payload_bytes);
      return buf;
    });
    // The transport has no timed wait; poll, quickly at first (a job's shard is usually
    // on its way when the last job ends), backing off to 5 ms when idle.
    for (auto nap = std::chrono::microseconds(200); !t.test(req);
         nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(5))) {
      if (stopping_) return Leave::stop;
      std::this_thread::sleep_for(nap);
    }
    std::uint64_t id = 0;
    try {
      const net::FrameHeader h = t.wait(req);
      id = h.job_id;
      peer::Shard s = peer::decode_shard(h, buf, world(), ring_->limits());  // spans into buf
      const JobRequest& q = s.request;
      const std::int64_t rows = static_cast<std::int64_t>(s.positions.size());
      const std::int64_t qw = q.heads * q.head_dim;
      std::vector<float> qrows(static_cast<std::size_t>(rows * qw));
      net::Request rq = t.irecv(0, std::as_writable_bytes(std::span(qrows)));
      const auto hq = t.wait(rq);
      if (hq.step != peer::kQuery || hq.job_id != id)
        throw NetworkError("rank 0 sent job " + std::to_string(hq.job_id) + "'s queries for job " + std::to_string(id),
                           FailureCause::protocol, 0);
      {
        std::lock_guard lock(mu_);
        running_id_ = id;
      }
      set_state(RingState::running);
      std::vector<float> o(qrows.size()), lse(static_cast<std::size_t>(rows * q.heads));
      ForwardStats st;
      auto last_step = Clock::now();
      RingInternals::set_step_hook(*ring_, [&](int step, std::span<std::byte>, std::atomic<std::uint64_t>&) {
        const auto now = Clock::now();
        if (step > 0) metrics_.observe("ringattn_step_seconds", {}, std::chrono::duration<double>(now - last_step).count());
        last_step = now;
      });
      try {
        st = ring_->forward(q.spec(), qrows, s.k, s.v, s.positions, o, lse);
        RingInternals::set_step_hook(*ring_, {});
      } catch (const InvalidArgument& e) {
        RingInternals::set_step_hook(*ring_, {});
        t.abort(FailureCause::local, rank(), "rank " + std::to_string(rank()) + " refused job " + std::to_string(id) + ": " + e.what());
        throw;
      } catch (...) {
        RingInternals::set_step_hook(*ring_, {});
        throw;
      }
      metrics_.observe("ringattn_step_seconds", {}, std::chrono::duration<double>(Clock::now() - last_step).count());
      // O and lse side by side per row, then the stats.
      const std::int64_t w = qw + q.heads;
      std::vector<float> res(static_cast<std::size_t>(rows * w));
      for (std::int64_t r = 0; r < rows; ++r) {
        std::copy_n(o.data() + r * qw, qw, res.data() + r * w);
        std::copy_n(lse.data() + r * q.heads, q.heads, res.data() + r * w + qw);
      }
      net::FrameHeader hr;
      hr.kind = net::FrameKind::state;
      hr.job_id = id;
      hr.step = peer::kResult;
      hr.rows = static_cast<std::uint32_t>(rows);
      hr.cols = static_cast<std::uint32_t>(w);
      NodeResult me{rank(), rows, st.seconds, st.compute_seconds, st.wait_seconds, st.useful_flops, st.steps, st.steps_skipped,
                    st.bytes_sent};
      const auto stats = peer::encode_stats(me);
      net::FrameHeader hs = hr;
      hs.step = peer::kStats;
      hs.rows = 1;
      hs.cols = 16;
      net::Request a = t.isend(0, hr, std::as_bytes(std::span(res)));
      net::Request b = t.isend(0, hs, stats);
      t.wait(a);
      t.wait(b);
      // Rank 0 has every rank's result once it says so (peer_messages.hpp, DONE): only then
      // may a draining worker leave, its leaving announced around the ring.
      std::array<float, 1> done{};
      net::Request d = t.irecv(0, std::as_writable_bytes(std::span(done)));
      const auto hd = t.wait(d);
      if (hd.step != peer::kDone || hd.job_id != id)
        throw NetworkError("rank 0 ended job " + std::to_string(hd.job_id) + " with step " + std::to_string(hd.step) +
                               " while this rank waited for job " + std::to_string(id) + "'s DONE",
                           FailureCause::protocol, 0);
      metrics_.add("ringattn_exposed_wait_seconds_total", {}, st.wait_seconds);
      metrics_.add("ringattn_compute_seconds_total", {}, st.compute_seconds);
      metrics_.add("ringattn_useful_flops_total", {}, st.useful_flops);
      record_job(id, JobResult::ok, st.seconds, q.describe(), "", FailureCause::unknown);
      {
        std::lock_guard lock(mu_);
        running_id_ = 0;
        record_transport();
      }
      logger("serve")->info("job {}: my {} rows in {:.3f} s", id, rows, st.seconds);
      set_state(stopping_ ? RingState::draining : RingState::ready);
      if (stopping_) return Leave::stop;
    } catch (const Error& e) {
      {
        std::lock_guard lock(mu_);
        last_ring_error_ = e.what();
        running_id_ = 0;
      }
      if (id != 0) {
        const auto* n = dynamic_cast<const NetworkError*>(&e);
        record_job(id, JobResult::failed, 0, "", e.what(), n ? n->cause() : FailureCause::local);
      }
      return Leave::broken;
    }
  }
}

}  // namespace ringattn::serve
