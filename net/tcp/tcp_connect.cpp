// TcpTransport's connect phase: dial the successor with retry and back-off, accept the
// predecessor, run the handshake on both, all under one deadline (connect_timeout).
// Both run as coroutines on the I/O thread; connect() waits for both or the first error.
#include "net/tcp/tcp_transport.hpp"

#include <asio/ip/address.hpp>
#include <asio/post.hpp>

#include "net/tcp/coroutines.hpp"
#include "net/tcp/handshake_io.hpp"
#include "ringattn/error.hpp"
#include "ringattn/log.hpp"

namespace ringattn::net::tcp {
namespace {

constexpr auto kAwait = asio::use_awaitable;
// The successor may not be listening yet; retries back off up to kMaxBackoff.
constexpr std::chrono::milliseconds kFirstBackoff{10}, kMaxBackoff{500};

}  // namespace

Hello TcpTransport::hello_template() const {
  Hello h;
  h.ring_id = config_.ring_id;
  h.rank = static_cast<std::uint32_t>(config_.rank);
  h.world = static_cast<std::uint32_t>(config_.world);
  h.link = LinkKind::ring;
  h.shape = config_.shape;
  return h;
}

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

}  // namespace ringattn::net::tcp
