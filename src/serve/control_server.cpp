#include "src/serve/control_server.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl/context.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "src/cli/log.hpp"
#include "net/tcp/coroutines.hpp"
#include "net/tcp/handshake_io.hpp"
#include "net/tcp/resolve.hpp"
#include "net/tcp/socket_options.hpp"
#include "net/tcp/tls.hpp"
#include "ringattn/error.hpp"
#include "src/cli/json_object.hpp"
#include "src/cli/json_value.hpp"
#include "src/io/finite_check.hpp"
#include "src/node/memory_budget.hpp"
#include "src/serve/control_wire.hpp"
#include "src/serve/peer_messages.hpp"

namespace ringattn::serve {

using net::tcp::Stream;

struct ControlServer::Impl {
  asio::io_context io;
  net::tcp::Acceptor acceptor{io};
  std::string secret;
  std::shared_ptr<asio::ssl::context> tls;
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
      net::tcp::Socket socket(io);
      std::error_code ec;
      co_await acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) continue;
      if (connections >= kMaxConnections) {
        metrics.add("ringattn_control_refused_total", {{"reason", "too_many"}});
        // A few over the cap still get their handshake and a one-line answer naming the
        // limit (a connection closed at once reads like a TLS or token mismatch to the
        // client); beyond those, closed.
        if (over_limit < kMaxOverLimit) asio::co_spawn(io, serve(std::move(socket), true), asio::detached);
        else socket.close(ec);
        continue;
      }
      asio::co_spawn(io, serve(std::move(socket), false), asio::detached);
    }
  }

  asio::awaitable<void> serve(net::tcp::Socket socket, bool refuse) {
    int& counter = refuse ? over_limit : connections;
    ++counter;
    struct Count {
      int& n;
      ~Count() { --n; }
    } count{counter};
    net::tcp::set_no_delay(socket);
    const std::string who = "client " + net::tcp::endpoint_text(socket, true);
    auto stream = tls ? std::make_shared<Stream>(std::make_unique<net::tcp::TlsStream>(std::move(socket), *tls))
                      : std::make_shared<Stream>(std::move(socket));
    net::tcp::HandshakeParams p;
    p.ours = net::control_hello(false);
    p.role = net::Role::acceptor;
    p.expected_rank = 1;
    p.secret = secret;
    p.peer_name = who;
    p.accept = [](net::LinkKind k) { return k == net::LinkKind::control ? std::optional<std::uint32_t>(1) : std::nullopt; };
    p.deadline = std::min(idle, Millis(5000));
    const auto r = co_await net::tcp::run_handshake(*stream, p);
    if (!r.ok()) {
      metrics.add("ringattn_control_refused_total", {{"reason", "handshake"}});
      cli::logger("serve")->info("control: dropped {}: {}", who, r.error);
      co_return;
    }
    try {
      if (refuse) {  // the client's request first (it writes before it reads), then why not
        co_await read_json(*stream, std::min(idle, Millis(5000)), who);
        co_await write_json(*stream,
                            error_event("the daemon is at its limit of " + std::to_string(kMaxConnections) +
                                        " client connections at once; try again in a moment"),
                            idle, who);
      } else {
        co_await converse(stream, who);
      }
    } catch (const std::exception& e) {
      cli::logger("serve")->info("control: {}: {}", who, e.what());
    }
    stream->close();
  }

  static std::string error_event(const std::string& message, const char* cause = "local") {
    cli::JsonObject d;
    d.add("result", "failed").add("message", message).add("cause", cause).add("rank", -1);
    cli::JsonObject o;
    o.add("event", "error").add("data", d);
    return o.str();
  }

  asio::awaitable<void> converse(std::shared_ptr<Stream> stream, const std::string& who) {
    const std::string text = co_await read_json(*stream, idle, who);
    cli::JsonValue v;
    std::string op, invalid;
    try {
      v = cli::parse_json(text);  // bounded: kMaxJsonBytes, then kMaxJsonDepth levels
      if (const auto* o = v.get("op"); o && o->kind == cli::JsonValue::Kind::string) op = o->string;
    } catch (const std::exception& e) {
      invalid = e.what();
    }
    if (!invalid.empty()) {
      co_await write_json(*stream, error_event("the request is not valid JSON: " + invalid), idle, who);
    } else if (op == "status") {
      co_await write_json(*stream, cli::JsonObject().add("event", "status").add_json("data", service.status_json()).str(),
                          idle, who);
    } else if (op == "nodes") {
      co_await write_json(*stream, cli::JsonObject().add("event", "nodes").add_json("data", service.nodes_json()).str(),
                          idle, who);
    } else if (op == "submit") {
      co_await submit(stream, who, text);
    } else {
      co_await write_json(*stream, error_event("unknown request (expected op submit, status or nodes)"), idle, who);
    }
  }

  asio::awaitable<void> submit(std::shared_ptr<Stream> stream, const std::string& who, const std::string& text) {
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
      co_await write_json(*stream, answer, idle, who);
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
      co_await write_json(*stream, error_event(refused), idle, who);
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
      co_await write_json(*stream, error_event(refused), idle, who);
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
      co_await write_json(*stream, *e, idle, who);
      if (!upload) continue;
      std::string bad;
      try {
        co_await receive_shards(*stream, who, *job);
      } catch (const InvalidArgument& x) {
        bad = x.what();
      }
      if (!bad.empty()) {  // the ring thread aborts the job once the upload ends, with this reason
        job->fail_upload(bad);
        co_await write_json(*stream, error_event(bad), idle, who);
        co_return;
      }
      // The client sends nothing more: a read that ends means it went away.
      asio::co_spawn(io, watch(stream, job->id, done), asio::detached);
    }
    if (job->result == JobResult::ok)
      for (const auto& rows : job->results) co_await write_tensor(*stream, std::as_bytes(std::span(rows)), idle, who);
    *done = true;
  }

  // Ranks 1..P-1, then 0: for each, K and V into its SHARD payload, Q into its QUERY.
  asio::awaitable<void> receive_shards(Stream& stream, const std::string& who, Job& job) {
    const JobRequest& q = job.request;
    const int P = service.world();
    for (int i = 1; i <= P; ++i) {
      const int rank = i % P;
      const Positions pos = shard_positions(q.layout, q.tokens, P, rank);
      ShardUpload u{rank, peer::shard_payload(q, pos), peer::query_payload(q, pos)};
      peer::Shard view = peer::shard_view(u.kv, q, pos.size());
      co_await read_tensor(stream, std::as_writable_bytes(view.k), idle, who);
      co_await read_tensor(stream, std::as_writable_bytes(view.v), idle, who);
      co_await read_tensor(stream, std::as_writable_bytes(peer::query_rows(u.q)), idle, who);
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

  asio::awaitable<void> watch(std::shared_ptr<Stream> stream, std::uint64_t id, std::shared_ptr<bool> done) {
    std::byte b[1];
    std::error_code ec;
    co_await stream->async_read_some(asio::buffer(b), asio::redirect_error(asio::use_awaitable, ec));
    if (*done) co_return;
    cli::logger("serve")->warn("job {}: the client went away ({}); aborting the job", id, ec ? ec.message() : "it sent data");
    service.abort_job(id, "its client disconnected");
  }

};

ControlServer::ControlServer(const std::string& listen, std::string secret, bool tls, double timeout_seconds,
                             RingService& service, Metrics& metrics)
    : impl_(std::make_unique<Impl>(service, metrics)) {
  auto& im = *impl_;
  im.secret = std::move(secret);
  im.idle = Millis(static_cast<std::int64_t>(timeout_seconds * 1000));
  if (tls) im.tls = net::tcp::make_tls_context(im.secret, net::tcp::TlsRole::server);
  const auto addr = net::parse_peer_address(listen, "--control");
  std::error_code ec;
  const asio::ip::tcp::endpoint ep(asio::ip::make_address(net::numeric_host(addr.host, "--control"), ec), addr.port);
  if (!ec) net::tcp::open_acceptor(im.acceptor, ep, /*large_buffers=*/false, ec);
  if (ec)
    throw NetworkError("cannot listen for clients on " + listen + " (--control): " + ec.message() +
                       " (is another daemon using that port? give each daemon on a host its own --control port)");
  asio::co_spawn(im.io, im.accept_loop(), asio::detached);
  im.thread = std::thread([&im] { im.io.run(); });
}

ControlServer::~ControlServer() {
  // A drained job's client still gets its result: wait (bounded) for the answers in flight.
  const auto until = std::chrono::steady_clock::now() + impl_->idle;
  while (impl_->active_jobs.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  asio::post(impl_->io, [im = impl_.get()] {
    std::error_code ignored;
    im->acceptor.close(ignored);
    im->io.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t ControlServer::port() const { return impl_->acceptor.local_endpoint().port(); }

}  // namespace ringattn::serve
