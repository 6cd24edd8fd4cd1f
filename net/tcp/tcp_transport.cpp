// TcpTransport: set-up, request posting and waiting, failure, close (connect is in
// tcp_connect.cpp).
#include "net/tcp/tcp_transport.hpp"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <asio/ip/address.hpp>
#include <asio/post.hpp>

#include "net/secret.hpp"
#include "net/self_transport.hpp"
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
