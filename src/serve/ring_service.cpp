// RingService: the daemon's ring — its state, forming and re-forming it, the nodes' table,
// status, the job queue; the jobs themselves are in ring_jobs.cpp.
#include "ring_service.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <thread>

#include "../cli/log.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn_config.h"
#include "../cli/json_object.hpp"
#include "peer_messages.hpp"
#include "service_events.hpp"

namespace ringattn::serve {
namespace {

std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

cli::JsonObject info_json(const peer::NodeInfo& n) {
  cli::JsonObject o;
  o.add("rank", n.rank).add("host", n.host).add("control", n.control).add("metrics", n.metrics);
  o.add("version", n.version).add("isa", n.isa).add("threads", n.threads);
  return o;
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
                         std::function<void(const std::string&)> notify, std::shared_ptr<const HostedModel> model)
    : config_(std::move(config)),
      metrics_(metrics),
      control_address_(std::move(control_address)),
      metrics_address_(std::move(metrics_address)),
      notify_(std::move(notify)),
      model_(std::move(model)) {
  if (rank() == 0) coordinator_ = control_address_;
  if (model_) {  // the ring's cache: cache_mib on every daemon, in rows of this model (of its part, each
                 // tensor-parallel group holding its rows once across its daemons)
    const int tp = model_->options.tp.size;
    const std::int64_t row = infer::cache_row_bytes(model_->options.model, model_->options.dtype, tp);
    const auto per_rank = static_cast<std::int64_t>(config_.cache_mib * 1048576.0 / static_cast<double>(row));
    const std::int64_t rows = per_rank * (world() / tp);
    sessions_ = std::make_unique<SessionTable>(rows, config_.session_ttl, model_->options.model.context, world() / tp);
    metrics_.set("ringattn_cache_rows_capacity", {}, static_cast<double>(rows));
  }
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

peer::NodeInfo RingService::node_info() const {
  return {rank(), config_.ring.threads, hostname(), control_address_, metrics_address_, RINGATTN_VERSION,
          std::string(to_string(config_.ring.isa.value_or(default_isa())))};
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
      cli::logger("serve")->warn("grace period of {:.0f} s over: aborting the running job", config_.grace);
      ring_->abort("rank " + std::to_string(rank()) + " is shutting down: the job was aborted after the grace period");
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
    ring_->abort("job " + std::to_string(job_id) + " aborted: " + why);
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

std::string RingService::health() const {
  const RingState s = state();
  if (s != RingState::ready && s != RingState::running) return std::string(to_string(s));
  std::lock_guard lock(mu_);
  if (ring_ && world() > 1)
    if (std::string f = ring_->link_failure(); !f.empty()) return "broken: " + f;
  return "ok";
}

void RingService::set_metrics_address(std::string address) {
  std::lock_guard lock(mu_);
  metrics_address_ = std::move(address);
}

std::string RingService::coordinator_address() const {
  std::lock_guard lock(mu_);
  return coordinator_;
}

std::string RingService::nodes_json() const {
  std::lock_guard lock(mu_);
  return cli::json_array(nodes_locked());
}

std::vector<cli::JsonObject> RingService::nodes_locked() const {
  std::vector<cli::JsonObject> v;
  if (nodes_.empty()) v.push_back(info_json(node_info()));  // before the ring formed: this node
  for (const auto& n : nodes_) v.push_back(info_json(n));
  return v;
}

RingService::Requests RingService::requests() const {
  std::lock_guard lock(mu_);
  if (!sessions_) return {};
  const auto queued = static_cast<std::int64_t>(generations_.size());
  return {sessions_->admitted() - queued, queued};
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
  // The hosted model's figures here, for rank 0's GET /v1/ring (ring_view.cpp): the rows this
  // rank keeps and what its links carried, as its /metrics says.
  auto figure = [&](const char* name) { return static_cast<std::int64_t>(metrics_.value(name).value_or(0)); };
  o.add("cache_rows", figure("ringattn_generation_cache_rows"));
  o.add("bytes_sent", figure("ringattn_bytes_sent_total")).add("bytes_received", figure("ringattn_bytes_received_total"));
  std::vector<cli::JsonObject> links;  // what it sent on each link that carried any, as its /metrics says
  for (int p = 0; p < world(); ++p) {
    const double sent = metrics_.value("ringattn_link_bytes_sent_total", {{"peer", std::to_string(p)}}).value_or(0);
    if (p != rank() && sent > 0) links.push_back(cli::JsonObject().add("peer", p).add("bytes_sent", static_cast<std::int64_t>(sent)));
  }
  o.add("links", links);
  o.add("nodes", nodes_locked());
  if (last_job_) o.add("last_job", *last_job_);
  else o.add_null("last_job");
  return o.str();
}

// ---- forming ----------------------------------------------------------------------

bool RingService::form() {
  set_state(stopping_ ? RingState::draining : RingState::forming);
  auto log = cli::logger("serve");
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
        seen_links_.clear();
        // The kept rows were the last ring's: every session ends with it.
        kept_.clear();
        if (sessions_) {
          sessions_->drop_all();
          record_sessions();
        }
        metrics_.set("ringattn_generation_cache_rows", {}, 0);
      }
      exchange_info();
      agree_on_model();
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
  std::vector<std::byte> buf;
  if (rank() == 0) {
    std::vector<peer::NodeInfo> nodes = {node_info()};
    for (int r = 1; r < world(); ++r) {
      peer::receive(*ring_, r, peer::Msg::info, 0, buf);
      nodes.push_back(peer::decode_info(buf, r));
    }
    const auto table = peer::encode_table(nodes);
    std::vector<MessageRequest> sends;
    for (int r = 1; r < world(); ++r)
      sends.push_back(ring_->send_message(r, static_cast<std::uint32_t>(peer::Msg::table), 0, table));
    for (auto& s : sends) ring_->wait(s);
    std::lock_guard lock(mu_);
    nodes_ = std::move(nodes);
  } else {
    peer::send(*ring_, 0, peer::Msg::info, 0, peer::encode_info(node_info()));
    peer::receive(*ring_, 0, peer::Msg::table, 0, buf);
    std::vector<peer::NodeInfo> nodes = peer::decode_table(buf, world());
    std::lock_guard lock(mu_);
    coordinator_ = nodes[0].control;
    nodes_ = std::move(nodes);
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
      ring_->abort("rank " + std::to_string(rank()) + " is shutting down", FailureCause::peer_closed);
    if (ring_) ring_->close();
    ring_.reset();
    if (why == Leave::released && !stopping_) cli::logger("serve")->info("a rank left the ring (draining); re-forming");
    if (why == Leave::broken) {
      metrics_.add("ringattn_ring_failures_total");
      cli::logger("serve")->warn("the ring broke{}; re-forming", last_ring_error_.empty() ? "" : ": " + last_ring_error_);
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
  const RingTraffic s = ring_->traffic();
  metrics_.add("ringattn_bytes_sent_total", {}, static_cast<double>(s.bytes_sent - seen_sent_));
  metrics_.add("ringattn_bytes_received_total", {}, static_cast<double>(s.bytes_received - seen_received_));
  seen_sent_ = s.bytes_sent;
  seen_received_ = s.bytes_received;
  for (const RingTraffic::Link& l : s.links) {  // each link's, by the rank at its other end
    auto& [sent, received] = seen_links_[l.peer];
    const Labels peer = {{"peer", std::to_string(l.peer)}};
    metrics_.add("ringattn_link_bytes_sent_total", peer, static_cast<double>(l.bytes_sent - sent));
    metrics_.add("ringattn_link_bytes_received_total", peer, static_cast<double>(l.bytes_received - received));
    sent = l.bytes_sent;
    received = l.bytes_received;
  }
}

}  // namespace ringattn::serve
