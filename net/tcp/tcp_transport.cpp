// TcpTransport: set-up, request posting and waiting with liveness, failure, close
// (accepting and connecting are in tcp_connect.cpp).
#include "net/tcp/tcp_transport.hpp"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <asio/ip/address.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>

#include "net/secret.hpp"
#include "net/self_transport.hpp"
#include "net/tcp/coroutines.hpp"
#include "ringattn/error.hpp"
#include "core/logger.hpp"

namespace ringattn::net {

std::unique_ptr<Transport> make_tcp_transport(const TransportConfig& config) {
  if (config.world == 1) return std::make_unique<SelfTransport>(config);
  return std::make_unique<tcp::TcpTransport>(config);
}

}  // namespace ringattn::net

namespace ringattn::net::tcp {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kMaxLinger{2000};

double thread_cpu_seconds(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TransportConfig checked(TransportConfig c) {
  if (c.world < 2) throw InvalidArgument("TCP transport: world size " + std::to_string(c.world) + " (needs >= 2)");
  if (c.rank < 0 || c.rank >= c.world)
    throw InvalidArgument("rank " + std::to_string(c.rank) + " is outside 0.." + std::to_string(c.world - 1));
  if (c.secret.empty())
    throw InvalidArgument("rank " + std::to_string(c.rank) + ": no shared secret (set " + kTokenEnv +
                          " or pass a token file); peers cannot be authenticated without one");
  if (c.connect_timeout.count() <= 0 || c.io_timeout.count() <= 0)
    throw InvalidArgument("rank " + std::to_string(c.rank) + ": connect_timeout and io_timeout must be positive");
  if (c.handshake_timeout.count() <= 0) c.handshake_timeout = std::min(milliseconds(5000), c.connect_timeout);
  if (c.keepalive.count() <= 0) c.keepalive = std::clamp(c.io_timeout / 5, milliseconds(10), milliseconds(2000));
  return c;
}

std::string ms_text(milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

}  // namespace

TcpTransport::TcpTransport(const TransportConfig& config)
    : config_(checked(config)),
      ms_connect_(ms_text(config_.connect_timeout)),
      ms_io_(ms_text(config_.io_timeout)),
      work_(io_.get_executor()),
      acceptor_(io_),
      peers_(static_cast<std::size_t>(config_.world)),
      backoff_timer_(io_) {
  if (config_.tls) {
    tls_client_ = make_tls_context(config_.secret, TlsRole::client);
    tls_server_ = make_tls_context(config_.secret, TlsRole::server);
  }
  env_.limits = FrameLimits::for_limits(config_.limits);
  env_.max_held_bytes = config_.max_held_bytes != 0 ? config_.max_held_bytes : 2 * env_.limits.max_payload;
  env_.conflict = config_.conflict;
  env_.tag_name = config_.tag_name;
  env_.linger = std::min<milliseconds>(config_.io_timeout, kMaxLinger);
  env_.flush = std::max(env_.linger, config_.io_timeout);
  env_.keepalive = config_.keepalive;
  env_.fail = [this](FailureCause cause, int origin, const std::string& message) { fail(cause, origin, message); };
  counters_ = std::make_unique<Counters[]>(static_cast<std::size_t>(config_.world));
  env_.counters = counters_.get();
  env_.liveness = &liveness_;
  leaving_.assign(static_cast<std::size_t>(config_.world), false);
  env_.peer_leaving = [this](int peer) {
    std::lock_guard lock(mu_);
    if (peer >= 0 && peer < config_.world && !leaving_[static_cast<std::size_t>(peer)]) {
      leaving_[static_cast<std::size_t>(peer)] = true;
      logger("net")->info("{}rank {} asks to leave the ring (draining)", prefix(), peer);
    }
  };

  std::error_code ec;
  const auto addr = asio::ip::make_address(config_.listen_host, ec);
  if (ec) throw InvalidArgument(prefix() + "listen_host '" + config_.listen_host + "' is not a numeric address");
  const asio::ip::tcp::endpoint ep(addr, config_.listen_port);
  open_acceptor(acceptor_, ep, /*large_buffers=*/true, ec);
  if (ec)
    throw NetworkError(prefix() + "cannot listen on " + config_.listen_host + ":" + std::to_string(config_.listen_port) +
                       ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();

  // The predecessor may connect before this rank calls connect(): accept from now on.
  asio::co_spawn(io_, accept_loop(), [this](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      fail(FailureCause::local, config_.rank, std::string("internal error in the accept loop: ") + ex.what());
    }
  });
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

void TcpTransport::fail(FailureCause cause, int origin, const std::string& message) {
  std::string text = prefix() + message;
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::failed || phase_ == Phase::closed) return;
    // While the ring forms, what was turned away may be the misconfigured peer.
    if (phase_ != Phase::connected && dropped_connections_ > 0)
      text += " (meanwhile dropped " + std::to_string(dropped_connections_) + " other connection(s), the last from " +
              last_dropped_ + ")";
    phase_ = Phase::failed;
    failure_ = text;
    failure_cause_ = cause;
    failure_origin_ = origin;
  }
  cv_.notify_all();
  logger("net")->error("{}", text);
  const ErrorInfo why{origin, cause, text};
  abort_connect_phase(why);
  shutdown_links(text, why);
}

void TcpTransport::announce_leaving() {
  liveness_.set_leaving();
  asio::post(io_, [this] {
    for (auto& link : links_) link->ping_now();
  });
}

std::vector<int> TcpTransport::leaving_peers() const {
  std::lock_guard lock(mu_);
  std::vector<int> v;
  for (std::size_t r = 0; r < leaving_.size(); ++r)
    if (leaving_[r]) v.push_back(static_cast<int>(r));
  return v;
}

void TcpTransport::fail_from_caller(FailureCause cause, int origin, const std::string& message) {
  asio::post(io_, [this, cause, origin, message] { fail(cause, origin, message); });
}

void TcpTransport::shutdown_links(const std::string& cause, const std::optional<ErrorInfo>& error) {
  for (auto& link : links_) link->shutdown(cause, error);
  for (auto& p : peers_) {  // requests still waiting for a link that never came
    for (auto& op : p.waiting_out) op->complete(cause);
    for (auto& op : p.waiting_in) op->complete(cause);
    p.waiting_out.clear();
    p.waiting_in.clear();
  }
}

void TcpTransport::close() {
  std::optional<ErrorInfo> failed;  // closed after a failure: a handshake still running learns its cause
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::closed) return;
    if (phase_ == Phase::failed) failed = ErrorInfo{failure_origin_, failure_cause_, failure_};
    phase_ = Phase::closed;
  }
  cv_.notify_all();
  const std::string cause = prefix() + "the transport was closed";
  asio::post(io_, [this, cause, failed] {
    // Connections still in their handshake never became links: name them once.
    for (const auto& [stream, h] : handshaking_)
      if (h.incoming)
        logger("net")->warn("{}dropped a connection from {}: still in its handshake at close", prefix(), h.from);
    abort_connect_phase(failed);
    accepting_ = false;
    std::error_code ignored;
    acceptor_.close(ignored);
    shutdown_links(cause, std::nullopt);  // BYE
  });
  work_.reset();  // run() returns once the links' closing coroutines have finished
  stop_io_thread();
}

void TcpTransport::stop_io_thread() {
  if (io_joined_) return;
  // The closing coroutines are bounded by env_.linger and env_.flush; this bound is only a
  // safety net.
  const auto deadline = Clock::now() + env_.linger + env_.flush + kAbortGrace;
  while (io_running_ && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(1));
  if (io_running_) {
    logger("net")->warn("{}I/O thread did not stop within its linger; stopping it", prefix());
    io_.stop();
  }
  io_thread_.join();
  io_joined_ = true;
}

// ---- requests --------------------------------------------------------------------------------

Request TcpTransport::post(std::shared_ptr<PendingOp> op) {
  if (op->peer < 0 || op->peer >= config_.world || op->peer == config_.rank)
    throw InvalidArgument(prefix() + (op->dir() == PendingOp::Dir::send ? "isend to" : "irecv from") + " rank " +
                          std::to_string(op->peer) + ": not another rank of 0.." + std::to_string(config_.world - 1));
  std::lock_guard lock(mu_);
  switch (phase_) {
    case Phase::connected:
      asio::post(io_, [this, op] {
        {
          std::lock_guard l(mu_);  // failed meanwhile: the op gets the cause, not "link closed"
          if (phase_ == Phase::failed) {
            op->complete(failure_);
            return;
          }
        }
        route(op);
      });
      break;
    case Phase::failed: op->complete(failure_); break;
    case Phase::closed: op->complete(prefix() + "the transport was closed"); break;
    default: throw InvalidArgument(prefix() + "isend/irecv before connect() completed");
  }
  return Request(std::move(op));
}

// Onto its link, or into the peer's waiting list until the link is up (I/O thread).
void TcpTransport::route(std::shared_ptr<PendingOp> op) {
  Peer& p = peers_[static_cast<std::size_t>(op->peer)];
  if (op->dir() == PendingOp::Dir::send) {
    if (p.out) return p.out->post(std::move(op));
    p.waiting_out.push_back(std::move(op));
    if (!p.dialing) {
      p.dialing = true;
      const int peer = p.waiting_out.back()->peer;
      asio::co_spawn(io_, dial(peer, LinkKind::p2p, Clock::now() + config_.connect_timeout), asio::detached);
    }
  } else {
    if (p.in) return p.in->post(std::move(op));
    p.waiting_in.push_back(std::move(op));
  }
}

Request TcpTransport::isend(int to, const Tag& tag, Payload payload, std::optional<std::uint32_t> crc) {
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::send, this);
  op->peer = to;
  op->header = check_data_send(tag, payload.size(), env_.limits, prefix());
  op->header.payload_crc = crc.value_or(0);
  op->crc_pending = !crc.has_value();
  op->payload = payload;
  return post(std::move(op));
}

Request TcpTransport::irecv(int from, const Tag& tag, std::span<std::byte> buffer) {
  check_recv_tag(tag, prefix());
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::recv, this);
  op->peer = from;
  op->tag = tag;
  op->buffer = buffer;
  return post(std::move(op));
}

Request TcpTransport::irecv(int from, const Tag& tag, BufferFor buffer_for) {
  check_recv_tag(tag, prefix());
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::recv, this);
  op->peer = from;
  op->tag = tag;
  op->buffer_for = std::move(buffer_for);
  return post(std::move(op));
}

void TcpTransport::abort(FailureCause cause, int origin, const std::string& message) {
  fail_from_caller(cause, origin, message);
  // Wait (bounded) until it took effect, so that a request posted next fails with it.
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, kAbortGrace, [&] { return phase_ == Phase::failed || phase_ == Phase::closed; });
}

FrameHeader TcpTransport::wait(Request& request) {
  auto* op = dynamic_cast<PendingOp*>(request.state());
  if (op == nullptr || op->owner() != this) throw InvalidArgument(prefix() + "wait() on an empty request or one of another transport");
  const auto waiting = liveness_.enter(PeerState::waiting);
  const auto t_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(config_.io_timeout).count();
  const auto check = std::max(milliseconds(5), config_.keepalive / 2);
  const std::int64_t start = PeerLiveness::now_ns();
  std::string cause;
  FailureCause kind = FailureCause::unknown;
  const std::string who = peer_name(op->peer, op->dir() == PendingOp::Dir::recv);
  const std::string what = op->dir() == PendingOp::Dir::send ? "sending to " + who : "waiting to receive from " + who;
  while (!op->wait_until(Clock::now() + check)) {
    const std::int64_t now = PeerLiveness::now_ns();
    const PeerLiveness* peer = op->live.load();
    if (peer == nullptr) {  // no link with that rank yet
      if (now - start > t_ns) {
        kind = FailureCause::peer_silent;
        cause = "timed out after " + ms_io_ + " " + what + ": no connection with it";
        break;
      }
      continue;
    }
    const std::int64_t heard = std::max(peer->heard_ns.load(), start);
    const std::int64_t advanced = peer->advanced_ns.load();
    liveness_.forward(advanced);  // the peer's chain moves: so does ours, for whoever waits on us
    if (now - heard > t_ns) {
      kind = FailureCause::peer_silent;
      cause = "timed out after " + ms_io_ + " " + what + ": no sign of life from it (no frame and no keep-alive; its process may be stopped or dead, or the network down)";
      break;
    }
    if (now - std::max(advanced, start) > t_ns) {
      kind = FailureCause::peer_stalled;
      const PeerState s = peer->peer_state();
      cause = "timed out after " + ms_io_ + " " + what + ": it is alive but made no progress (" +
              (s == PeerState::busy      ? "busy, but its computation did not advance"
               : s == PeerState::waiting ? "it is itself waiting, on a rank that made no progress"
                                         : "idle: not inside a ring call") +
              ")";
      break;
    }
  }
  if (!cause.empty()) {
    fail_from_caller(kind, op->peer, cause);
    if (!op->wait_until(Clock::now() + kAbortGrace)) {  // the I/O thread is stuck: stop it
      io_.stop();
      op->complete(prefix() + cause);
    }
  }
  if (std::string err = op->error(); !err.empty()) {
    std::lock_guard lock(mu_);
    throw NetworkError(err, failure_cause_, failure_origin_);
  }
  return op->header;
}

std::string TcpTransport::failure() const {
  std::lock_guard lock(mu_);
  return phase_ == Phase::failed ? failure_ : std::string();
}

bool TcpTransport::test(const Request& request) const { return request_done(request); }

TransportStats TcpTransport::stats() const {
  TransportStats s;
  for (int p = 0; p < config_.world; ++p) {  // the totals are the links' sums, each counter read once
    const Counters& c = counters_[static_cast<std::size_t>(p)];
    const std::uint64_t sent = c.bytes_sent, received = c.bytes_received;
    s.frames_sent += c.frames_sent;
    s.frames_received += c.frames_received;
    if (sent == 0 && received == 0) continue;
    s.links.push_back({p, sent, received});
    s.bytes_sent += sent;
    s.bytes_received += received;
  }
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
