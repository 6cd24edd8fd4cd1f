#include "control_server.hpp"

#include "ringattn/channel.hpp"  // first Asio include: silences GCC's coroutine false positive

#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "../cli/log.hpp"
#include "ringattn/error.hpp"
#include "../cli/json_object.hpp"
#include "../../infer/common/json.hpp"
#include "../io/finite_check.hpp"
#include "../node/memory_budget.hpp"
#include "control_protocol.hpp"
#include "peer_messages.hpp"

namespace ringattn::serve {

struct ControlServer::Impl {
  asio::io_context io;
  std::unique_ptr<ChannelListener> listener;
  Millis idle{30000};
  RingService& service;
  Metrics& metrics;
  int connections = 0;
  int over_limit = 0;  // connections past the cap being told so
  std::atomic<int> active_jobs{0};  // submissions not yet answered in full
  std::thread thread;

  Impl(RingService& s, Metrics& m) : service(s), metrics(m) {}

  asio::awaitable<void> accept_loop() {
    for (;;) {
      std::optional<Channel> channel = co_await listener->accept();
      if (!channel) co_return;
      if (connections >= kMaxConnections) {
        metrics.add("ringattn_control_refused_total", {{"reason", "too_many"}});
        // A few over the cap still get their handshake and a one-line answer naming the
        // limit (a connection closed at once reads like a TLS or token mismatch to the
        // client); beyond those, closed.
        if (over_limit < kMaxOverLimit) asio::co_spawn(io, serve(std::move(*channel), true), asio::detached);
        else channel->close();
        continue;
      }
      asio::co_spawn(io, serve(std::move(*channel), false), asio::detached);
    }
  }

  asio::awaitable<void> serve(Channel channel, bool refuse) {
    int& counter = refuse ? over_limit : connections;
    ++counter;
    struct Count {
      int& n;
      ~Count() { --n; }
    } count{counter};
    const std::string refused = co_await channel.authenticate(std::min(idle, Millis(5000)));
    if (!refused.empty()) {
      metrics.add("ringattn_control_refused_total", {{"reason", "handshake"}});
      cli::logger("serve")->info("control: dropped {}: {}", channel.peer(), refused);
      channel.close();
      co_return;
    }
    try {
      if (refuse) {  // the client's request first (it writes before it reads), then why not
        channel.set_idle(std::min(idle, Millis(5000)));
        co_await channel.read_json();
        channel.set_idle(idle);
        co_await channel.write_json(error_event("the daemon is at its limit of " + std::to_string(kMaxConnections) +
                                                " client connections at once; try again in a moment"));
      } else {
        co_await converse(channel);
      }
    } catch (const std::exception& e) {
      cli::logger("serve")->info("control: {}: {}", channel.peer(), e.what());
    }
    channel.close();
  }

  static std::string error_event(const std::string& message, const char* cause = "local") {
    cli::JsonObject d;
    d.add("result", "failed").add("message", message).add("cause", cause).add("rank", -1);
    cli::JsonObject o;
    o.add("event", "error").add("data", d);
    return o.str();
  }

  asio::awaitable<void> converse(Channel& channel) {
    const std::string text = co_await channel.read_json();
    std::string op, invalid;
    try {
      const infer::Json v = infer::parse_json(text);  // bounded: kMaxChannelJson, then kMaxJsonDepth levels
      if (const std::string* o = infer::json_string(v, "op")) op = *o;
    } catch (const std::exception& e) {
      invalid = e.what();
    }
    if (!invalid.empty()) {
      co_await channel.write_json(error_event("the request is not valid JSON: " + invalid));
    } else if (op == "status") {
      co_await channel.write_json(cli::JsonObject().add("event", "status").add_json("data", service.status_json()).str());
    } else if (op == "nodes") {
      co_await channel.write_json(cli::JsonObject().add("event", "nodes").add_json("data", service.nodes_json()).str());
    } else if (op == "submit") {
      co_await submit(channel, text);
    } else {
      co_await channel.write_json(error_event("unknown request (expected op submit, status or nodes)"));
    }
  }

  asio::awaitable<void> submit(Channel& channel, const std::string& text) {
    const std::string& who = channel.peer();
    if (service.rank() != 0) {
      const std::string to = service.coordinator_address();
      cli::JsonObject d;
      d.add("to", to).add("rank", service.rank());
      cli::JsonObject o;
      o.add("event", "redirect").add("data", d);
      // (The answer goes into a variable first: GCC 12 miscompiles temporaries of a ?:
      // inside a co_await expression — a double free.)
      std::string answer = o.str();
      if (to.empty())
        answer = error_event("this daemon is rank " + std::to_string(service.rank()) +
                             " and does not know rank 0's address yet; submit to rank 0");
      co_await channel.write_json(answer);
      co_return;
    }
    auto job = std::make_shared<Job>();
    std::string refused;
    try {
      const double avail = node::available_memory_bytes().value_or(4.0 * (1ull << 30));
      job->request = parse_job_request(text, service.world(), service.limits(), static_cast<std::uint64_t>(avail * 0.8),
                                       service.wire_dtype());
    } catch (const Error& e) {
      refused = e.what();
    }
    if (!refused.empty()) {
      co_await channel.write_json(error_event(refused));
      co_return;
    }
    // Queued now; the tensors come when the ring is free for this job (the "upload"
    // event), shard by shard, straight into the buffers rank 0 forwards.
    job->id = service.next_job_id();
    job->events = std::make_shared<EventQueue>(io.get_executor());
    try {
      service.submit(job);
    } catch (const Error& e) {
      refused = e.what();
    }
    if (!refused.empty()) {
      co_await channel.write_json(error_event(refused));
      co_return;
    }
    ++active_jobs;
    struct Active {  // whatever happens, the ring thread never waits for an upload that ended
      std::atomic<int>& n;
      Job& job;
      ~Active() {
        job.fail_upload();
        --n;
      }
    } active{active_jobs, *job};
    cli::logger("serve")->info("job {} from {}: {}", job->id, who, job->request.describe());
    auto done = std::make_shared<bool>(false);
    for (;;) {
      auto e = co_await job->events->next(Millis(1000));
      if (!e) break;
      if (e->empty()) *e = cli::JsonObject().add("event", "alive").add("data", cli::JsonObject()).str();
      const bool upload = e->rfind("{\"event\":\"upload\"", 0) == 0;
      co_await channel.write_json(*e);
      if (!upload) continue;
      std::string bad;
      try {
        co_await receive_shards(channel, *job);
      } catch (const InvalidArgument& x) {
        bad = x.what();
      }
      if (!bad.empty()) {  // the ring thread aborts the job once the upload ends, with this reason
        job->fail_upload(bad);
        co_await channel.write_json(error_event(bad));
        co_return;
      }
      // The client sends nothing more: a read that ends means it went away.
      asio::co_spawn(io, watch(channel, job->id, done), asio::detached);
    }
    if (job->result == JobResult::ok)
      for (const auto& rows : job->results) co_await channel.write_tensor(std::as_bytes(std::span(rows)));
    *done = true;
  }

  // Ranks 1..P-1, then 0: for each, K and V into its SHARD payload, Q into its QUERY.
  asio::awaitable<void> receive_shards(Channel& channel, Job& job) {
    const JobRequest& q = job.request;
    const int P = service.world();
    for (int i = 1; i <= P; ++i) {
      const int rank = i % P;
      const Positions pos = shard_positions(q.layout, q.tokens, P, rank);
      ShardUpload u{rank, peer::shard_payload(q, pos), peer::query_payload(q, pos)};
      peer::Shard view = peer::shard_view(u.kv, q, pos.size());
      co_await channel.read_tensor(std::as_writable_bytes(view.k));
      co_await channel.read_tensor(std::as_writable_bytes(view.v));
      co_await channel.read_tensor(std::as_writable_bytes(peer::query_rows(u.q)));
      // The same check as `run`'s nodes, naming the tensor, token, head and value.
      io::NpyInfo info;
      std::vector<io::RowRange> ranges;
      for (const auto& run : shard_row_runs(pos)) ranges.push_back({run.begin, run.end});
      try {
        info.shape = {q.tokens, q.kv_heads, q.head_dim};
        io::check_finite("K", view.k, ranges, info, "kv head");
        io::check_finite("V", view.v, ranges, info, "kv head");
        info.shape = {q.tokens, q.heads, q.head_dim};
        io::check_finite("Q", peer::query_rows(u.q), ranges, info, "head");
      } catch (const FileError& e) {
        throw InvalidArgument(e.what());
      }
      job.push_upload(std::move(u));
    }
  }

  asio::awaitable<void> watch(Channel channel, std::uint64_t id, std::shared_ptr<bool> done) {
    const std::string why = co_await channel.wait_closed();
    if (*done) co_return;
    cli::logger("serve")->warn("job {}: the client went away ({}); aborting the job", id, why);
    service.abort_job(id, "its client disconnected");
  }
};

ControlServer::ControlServer(const std::string& listen, std::string secret, bool tls, double timeout_seconds,
                             RingService& service, Metrics& metrics)
    : impl_(std::make_unique<Impl>(service, metrics)) {
  auto& im = *impl_;
  im.idle = Millis(static_cast<std::int64_t>(timeout_seconds * 1000));
  im.listener = std::make_unique<ChannelListener>(im.io.get_executor(), listen, ChannelOptions{std::move(secret), tls, im.idle},
                                                  "--control");
  asio::co_spawn(im.io, im.accept_loop(), asio::detached);
  im.thread = std::thread([&im] { im.io.run(); });
}

ControlServer::~ControlServer() {
  // A drained job's client still gets its result: wait (bounded) for the answers in flight.
  const auto until = std::chrono::steady_clock::now() + impl_->idle;
  while (impl_->active_jobs.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  asio::post(impl_->io, [im = impl_.get()] {
    im->listener->close();
    im->io.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t ControlServer::port() const { return impl_->listener->port(); }

}  // namespace ringattn::serve
