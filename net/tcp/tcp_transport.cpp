// TcpTransport: set-up, connect/accept, request posting and waiting, failure, close.
#include "net/tcp/tcp_transport.hpp"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <asio/ip/address.hpp>
#include <asio/post.hpp>

#include "net/secret.hpp"
#include "net/self_transport.hpp"
#include "net/tcp/coroutines.hpp"
#include "net/tcp/handshake_io.hpp"
#include "ringattn/error.hpp"
#include "ringattn/log.hpp"

namespace ringattn::net {

std::unique_ptr<RingTransport> make_tcp_transport(const TransportConfig& config) {
  if (config.world == 1) return std::make_unique<SelfTransport>(config);
  return std::make_unique<tcp::TcpTransport>(config);
}

}  // namespace ringattn::net

namespace ringattn::net::tcp {
namespace {

constexpr auto kAwait = asio::use_awaitable;
constexpr std::chrono::milliseconds kFirstBackoff{10}, kMaxBackoff{500};
// How long a waiter gives the I/O thread to abort after a timeout before stopping it.
constexpr std::chrono::seconds kAbortGrace{5};
constexpr std::chrono::milliseconds kMaxLinger{2000};

double thread_cpu_seconds(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void check_config(const TransportConfig& c) {
  if (c.world < 2) throw InvalidArgument("TCP transport: world size " + std::to_string(c.world) + " (needs >= 2)");
  if (c.rank < 0 || c.rank >= c.world)
    throw InvalidArgument("rank " + std::to_string(c.rank) + " is outside 0.." + std::to_string(c.world - 1));
  if (c.secret.empty())
    throw InvalidArgument("rank " + std::to_string(c.rank) + ": no shared secret (set " + kTokenEnv +
                          " or pass a token file); peers cannot be authenticated without one");
  if (c.connect_timeout.count() <= 0 || c.io_timeout.count() <= 0)
    throw InvalidArgument("rank " + std::to_string(c.rank) + ": connect_timeout and io_timeout must be positive");
}

}  // namespace

TcpTransport::TcpTransport(const TransportConfig& config)
    : config_(config),
      limits_((check_config(config), FrameLimits::for_job(config.shape))),
      successor_((config.rank + 1) % config.world),
      predecessor_((config.rank + config.world - 1) % config.world),
      ms_connect_(std::to_string(config.connect_timeout.count()) + " ms"),
      ms_io_(std::to_string(config.io_timeout.count()) + " ms"),
      work_(io_.get_executor()),
      acceptor_(io_),
      dial_socket_(io_),
      accept_socket_(io_),
      connect_timer_(io_),
      backoff_timer_(io_) {
  env_.limits = limits_;
  env_.linger = std::min<std::chrono::milliseconds>(config.io_timeout, kMaxLinger);
  env_.fail = [this](const std::string& cause) { fail(prefix() + cause); };
  env_.counters = &counters_;

  std::error_code ec;
  const auto addr = asio::ip::make_address(config.listen_host, ec);
  if (ec) throw InvalidArgument(prefix() + "listen_host '" + config.listen_host + "' is not a numeric address");
  const asio::ip::tcp::endpoint ep(addr, config.listen_port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) set_buffer_sizes(acceptor_);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw NetworkError(prefix() + "cannot listen on " + config.listen_host + ":" + std::to_string(config.listen_port) +
                       ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();

  io_running_ = true;
  io_thread_ = std::thread([this] {
    io_.run();
    io_cpu_final_ = thread_cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
    io_running_ = false;
  });
}

TcpTransport::~TcpTransport() {
  try {
    close();
  } catch (...) {  // a destructor never throws; close() already logged
  }
}

Hello TcpTransport::hello_template() const {
  Hello h;
  h.ring_id = config_.ring_id;
  h.rank = static_cast<std::uint32_t>(config_.rank);
  h.world = static_cast<std::uint32_t>(config_.world);
  h.link = LinkKind::ring;
  h.shape = config_.shape;
  return h;
}

// ---- connect ---------------------------------------------------------------------------

void TcpTransport::connect(const std::vector<PeerAddress>& peers) {
  if (peers.size() != static_cast<std::size_t>(config_.world))
    throw InvalidArgument(prefix() + "connect() got " + std::to_string(peers.size()) + " peer addresses for world size " +
                          std::to_string(config_.world));
  const PeerAddress succ = peers[static_cast<std::size_t>(successor_)];
  if (succ.port == 0 || succ.host.empty())
    throw InvalidArgument(prefix() + "successor rank " + std::to_string(successor_) + " has no address");
  {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::idle) throw InvalidArgument(prefix() + "connect() may be called once, before close()");
    phase_ = Phase::connecting;
    connect_tasks_left_ = 2;
  }
  const auto deadline = Clock::now() + config_.connect_timeout;
  asio::post(io_, [this, succ, deadline] {
    connect_timer_.expires_at(deadline);
    connect_timer_.async_wait([this](std::error_code ec) {
      if (ec) return;
      connect_timed_out_ = true;
      abort_connect_phase();
    });
    auto on_exit = [this](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        connect_task_done(std::string("internal error while connecting: ") + ex.what());
      }
    };
    asio::co_spawn(io_, dial_successor(succ), on_exit);
    asio::co_spawn(io_, accept_predecessor(), on_exit);
  });
  std::unique_lock lock(mu_);
  // The I/O thread enforces the deadline itself; the grace only guards against a bug there.
  const bool settled = cv_.wait_until(lock, deadline + kAbortGrace, [&] { return phase_ != Phase::connecting; });
  if (phase_ == Phase::connected) return;
  std::string cause = !settled             ? prefix() + "connect() did not finish within " + ms_connect_
                      : failure_.empty() ? prefix() + "the transport was closed during connect()"
                                         : failure_;
  lock.unlock();
  if (!settled) asio::post(io_, [this, cause] { fail(cause); });
  throw NetworkError(cause);
}

asio::awaitable<void> TcpTransport::dial_successor(PeerAddress addr) {
  const std::string target = "successor rank " + std::to_string(successor_) + " at " + addr.host + ":" + std::to_string(addr.port);
  std::error_code ec;
  std::vector<asio::ip::tcp::endpoint> endpoints;
  if (const auto ip = asio::ip::make_address(addr.host, ec); !ec) {
    endpoints.emplace_back(ip, addr.port);
  } else {
    asio::ip::tcp::resolver resolver(io_);
    const auto results = co_await resolver.async_resolve(addr.host, std::to_string(addr.port), asio::redirect_error(kAwait, ec));
    if (connect_aborted_) co_return connect_task_done("");
    if (ec) co_return connect_task_done("cannot resolve " + target + ": " + ec.message());
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  std::string last_error = "none";
  int attempts = 0;
  bool connected = false;
  for (auto backoff = kFirstBackoff; !connect_aborted_ && !connected;
       backoff = std::min<std::chrono::milliseconds>(backoff * 2, kMaxBackoff)) {
    for (const auto& ep : endpoints) {
      ++attempts;
      dial_socket_ = Socket(io_);
      dial_socket_.open(ep.protocol(), ec);
      if (!ec) set_buffer_sizes(dial_socket_);
      if (!ec) co_await dial_socket_.async_connect(ep, asio::redirect_error(kAwait, ec));
      if (connect_aborted_) break;
      if (!ec) {
        connected = true;
        break;
      }
      last_error = ec.message();
    }
    if (connected || connect_aborted_) break;
    backoff_timer_.expires_after(backoff);  // the successor may not be listening yet
    co_await backoff_timer_.async_wait(asio::redirect_error(kAwait, ec));
  }
  if (!connected) {
    co_return connect_task_done(connect_timed_out_ ? "could not connect to " + target + " within " + ms_connect_ + " (" +
                                                         std::to_string(attempts) + " attempts, last error: " + last_error + ")"
                                                   : "");
  }
  set_no_delay(dial_socket_);
  HandshakeParams params{hello_template(), Role::initiator, static_cast<std::uint32_t>(successor_), config_.secret};
  HandshakeResult r = co_await run_handshake(dial_socket_, params);
  if (!r.ok) {
    if (connect_timed_out_) co_return connect_task_done("handshake with " + target + " did not complete within " + ms_connect_);
    co_return connect_task_done(connect_aborted_ ? "" : "handshake with " + target + " failed: " + r.error);
  }
  auto link = std::make_unique<Link>(std::move(dial_socket_), Link::Dir::out, config_.rank, successor_, env_);
  out_ = link.get();
  out_links_[successor_] = std::move(link);
  logger("net")->info("connected {} (ring)", out_->name());
  out_->start();
  connect_task_done("");
}

asio::awaitable<void> TcpTransport::accept_predecessor() {
  const std::string who = "predecessor rank " + std::to_string(predecessor_);
  std::error_code ec;
  while (!connect_aborted_) {
    accept_socket_ = Socket(io_);
    co_await acceptor_.async_accept(accept_socket_, asio::redirect_error(kAwait, ec));
    if (connect_aborted_) break;
    if (ec) co_return connect_task_done("accepting a connection from " + who + " failed: " + ec.message());
    set_no_delay(accept_socket_);
    std::string from = "?";
    if (auto ep = accept_socket_.remote_endpoint(ec); !ec) from = ep.address().to_string() + ":" + std::to_string(ep.port());
    HandshakeParams params{hello_template(), Role::acceptor, static_cast<std::uint32_t>(predecessor_), config_.secret};
    HandshakeResult r = co_await run_handshake(accept_socket_, params);
    if (r.ok) {
      auto link = std::make_unique<Link>(std::move(accept_socket_), Link::Dir::in, config_.rank, predecessor_, env_);
      in_ = link.get();
      in_links_[predecessor_] = std::move(link);
      logger("net")->info("connected {} (ring)", in_->name());
      in_->start();
      co_return connect_task_done("");
    }
    if (connect_aborted_) break;
    if (r.fatal) co_return connect_task_done("refused the connection from " + from + " (expected " + who + "): " + r.error);
    // Not a ringattn peer at all (a port scan, a health check): note it and keep waiting.
    ++ignored_connections_;
    last_ignored_ = from + ": " + r.error;
    logger("net")->warn("{}ignored a connection from {}", prefix(), last_ignored_);
    std::error_code ignored;
    accept_socket_.close(ignored);
  }
  if (!connect_timed_out_) co_return connect_task_done("");
  std::string msg = "no connection from " + who + " within " + ms_connect_;
  if (ignored_connections_ > 0)
    msg += " (ignored " + std::to_string(ignored_connections_) + " non-ringattn connection(s), last from " + last_ignored_ + ")";
  connect_task_done(msg);
}

void TcpTransport::connect_task_done(const std::string& error) {
  if (!error.empty()) {
    fail(prefix() + error);
    return;
  }
  std::lock_guard lock(mu_);
  if (phase_ != Phase::connecting) return;  // failed meanwhile; fail() already set the cause
  if (--connect_tasks_left_ == 0) {
    phase_ = Phase::connected;
    connect_timer_.cancel();
    cv_.notify_all();
  }
}

void TcpTransport::abort_connect_phase() {
  connect_aborted_ = true;
  std::error_code ignored;
  acceptor_.cancel(ignored);
  dial_socket_.close(ignored);
  accept_socket_.close(ignored);
  backoff_timer_.cancel();
  connect_timer_.cancel();
}

// ---- failure and close (I/O thread) ---------------------------------------------------------

void TcpTransport::fail(const std::string& cause) {
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::failed || phase_ == Phase::closed) return;
    phase_ = Phase::failed;
    failure_ = cause;
  }
  cv_.notify_all();
  logger("net")->error("{}", cause);
  abort_connect_phase();
  shutdown_links(cause, cause);
}

void TcpTransport::shutdown_links(const std::string& cause, const std::string& error_text) {
  for (auto* links : {&out_links_, &in_links_})
    for (auto& [rank, link] : *links) link->shutdown(cause, error_text);
}

void TcpTransport::close() {
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::closed) return;
    phase_ = Phase::closed;
  }
  cv_.notify_all();
  const std::string cause = prefix() + "the transport was closed";
  asio::post(io_, [this, cause] {
    abort_connect_phase();
    std::error_code ignored;
    acceptor_.close(ignored);
    shutdown_links(cause, "");  // BYE
  });
  work_.reset();  // run() returns once the links' closing coroutines have finished
  stop_io_thread();
}

void TcpTransport::stop_io_thread() {
  if (io_joined_) return;
  // The closing coroutines are bounded by env_.linger; this bound is only a safety net.
  const auto deadline = Clock::now() + env_.linger + kAbortGrace;
  while (io_running_ && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (io_running_) {
    logger("net")->warn("{}I/O thread did not stop within its linger; stopping it", prefix());
    io_.stop();
  }
  io_thread_.join();
  io_joined_ = true;
}

// ---- requests --------------------------------------------------------------------------------

Request TcpTransport::post(std::shared_ptr<PendingOp> op, Link* link) {
  std::lock_guard lock(mu_);
  switch (phase_) {
    case Phase::connected:
      asio::post(io_, [op, link] { link->post(op); });
      break;
    case Phase::failed: op->complete(failure_); break;
    case Phase::closed: op->complete(prefix() + "the transport was closed"); break;
    default: throw InvalidArgument(prefix() + "isend/irecv before connect() completed");
  }
  return Request(std::move(op));
}

Request TcpTransport::isend(FrameHeader header, std::span<const std::byte> payload, std::optional<std::uint32_t> crc) {
  header.payload_bytes = payload.size();
  if (is_control(header.kind))
    throw InvalidArgument(prefix() + "isend of a " + std::string(to_string(header.kind)) + " frame (data frames only)");
  if (std::string err = check_header(header, limits_); !err.empty()) throw InvalidArgument(prefix() + "isend: " + err);
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::send, this);
  op->header = header;
  op->header.payload_crc = crc.value_or(0);
  op->crc_pending = !crc.has_value();
  op->payload = payload;
  return post(std::move(op), out_);
}

Request TcpTransport::irecv(std::span<std::byte> buffer) {
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::recv, this);
  op->buffer = buffer;
  return post(std::move(op), in_);
}

FrameHeader TcpTransport::wait(Request& request) {
  auto* op = dynamic_cast<PendingOp*>(request.state());
  if (op == nullptr || op->owner() != this) throw InvalidArgument(prefix() + "wait() on an empty request or one of another transport");
  if (!op->wait_until(Clock::now() + config_.io_timeout)) {
    const std::string cause =
        prefix() + "timed out after " + ms_io_ +
        (op->dir() == PendingOp::Dir::send ? " sending to successor rank " + std::to_string(successor_)
                                           : " waiting to receive from predecessor rank " + std::to_string(predecessor_));
    asio::post(io_, [this, cause] { fail(cause); });
    if (!op->wait_until(Clock::now() + kAbortGrace)) {  // the I/O thread is stuck: stop it
      io_.stop();
      op->complete(cause);
    }
  }
  if (std::string err = op->error(); !err.empty()) throw NetworkError(err);
  return op->header;
}

bool TcpTransport::test(const Request& request) const {
  auto* op = dynamic_cast<PendingOp*>(request.state());
  return op != nullptr && op->done();
}

TransportStats TcpTransport::stats() const {
  TransportStats s;
  s.bytes_sent = counters_.bytes_sent;
  s.bytes_received = counters_.bytes_received;
  s.frames_sent = counters_.frames_sent;
  s.frames_received = counters_.frames_received;
  double cpu = -1;
  if (io_running_) {
    clockid_t clock{};
    if (pthread_getcpuclockid(const_cast<std::thread&>(io_thread_).native_handle(), &clock) == 0)
      cpu = thread_cpu_seconds(clock);
  }
  s.io_cpu_seconds = cpu >= 0 ? cpu : io_cpu_final_.load();
  return s;
}

}  // namespace ringattn::net::tcp
