// TcpTransport's connections: the accept loop that serves every incoming connection in
// its own coroutine under its own handshake deadline, and the dial to a peer with retry
// and back-off. connect() waits for the two ring links under one deadline; other links
// are dialled when a request first needs them.
#include <asio/detached.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>

#include "core/logger.hpp"
#include "net/tcp/coroutines.hpp"
#include "net/tcp/resolve.hpp"
#include "net/tcp/stream_deadline.hpp"
#include "net/tcp/tcp_transport.hpp"
#include "ringattn/error.hpp"

namespace ringattn::net::tcp {
namespace {

constexpr auto kAwait = asio::use_awaitable;

}  // namespace

Hello TcpTransport::hello_template(LinkKind kind) const {
  return make_hello(config_.ring_id, config_.rank, config_.world, kind, config_.limits);
}

std::string TcpTransport::peer_name(int peer, bool receiving) const {
  const std::string r = "rank " + std::to_string(peer);
  if (receiving && peer == predecessor()) return "predecessor " + r;
  if (!receiving && peer == successor()) return "successor " + r;
  return r;
}

// Registers the stream as handshaking, so that giving up cancels it with a reason.
HandshakeParams TcpTransport::handshake_params(Role role, int expected_rank, LinkKind kind, Stream& stream,
                                               std::string from) {
  auto abort = std::make_shared<std::optional<ErrorInfo>>();
  handshaking_[&stream] = Handshaking{from, abort, false, role == Role::acceptor};
  HandshakeParams p;
  p.ours = hello_template(kind);
  p.role = role;
  p.expected_rank = static_cast<std::uint32_t>(expected_rank);
  p.secret = config_.secret;
  p.peer_name = from;
  p.deadline = config_.handshake_timeout;
  p.abort = abort;
  if (role == Role::acceptor) {
    // The ring link comes from the predecessor; on-demand links from any other rank.
    const int pred = predecessor();
    p.accept = [pred](LinkKind k) -> std::optional<std::uint32_t> {
      if (k == LinkKind::ring) return static_cast<std::uint32_t>(pred);
      if (k == LinkKind::p2p) return kAnyRank;
      return std::nullopt;
    };
  }
  return p;
}

Stream TcpTransport::make_stream(Socket socket, Role role) {
  set_no_delay(socket);
  if (!config_.tls) return Stream(std::move(socket));
  auto& ctx = role == Role::initiator ? *tls_client_ : *tls_server_;
  return Stream(std::make_unique<TlsStream>(std::move(socket), ctx));
}

void TcpTransport::connect(const std::vector<PeerAddress>& peers) {
  if (peers.size() != static_cast<std::size_t>(config_.world))
    throw InvalidArgument(prefix() + "connect() got " + std::to_string(peers.size()) + " peer addresses for world size " +
                          std::to_string(config_.world));
  for (int r = 0; r < config_.world; ++r)
    if (r != config_.rank && (peers[static_cast<std::size_t>(r)].port == 0 || peers[static_cast<std::size_t>(r)].host.empty()))
      throw InvalidArgument(prefix() + "rank " + std::to_string(r) + " has no address");
  const auto deadline = Clock::now() + config_.connect_timeout;
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::failed) throw NetworkError(failure_, failure_cause_, failure_origin_);
    if (phase_ != Phase::idle) throw InvalidArgument(prefix() + "connect() may be called once, before close()");
    phase_ = Phase::connecting;
  }
  asio::post(io_, [this, peers, deadline] {
    addresses_ = peers;
    for (int r = 0; r < config_.world; ++r) {
      if (r == config_.rank || (r != successor() && !config_.all_pairs)) continue;
      Peer& p = peers_[static_cast<std::size_t>(r)];
      if (p.out == nullptr && !p.dialing) {
        p.dialing = true;
        asio::co_spawn(io_, dial(r, r == successor() ? LinkKind::ring : LinkKind::p2p, deadline), asio::detached);
      }
    }
    link_ready();  // the predecessor may already be connected
  });
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return phase_ != Phase::connecting; });
  if (phase_ == Phase::connecting) {
    lock.unlock();
    asio::post(io_, [this] { connect_deadline_passed(); });
    lock.lock();
    if (!cv_.wait_until(lock, Clock::now() + kAbortGrace, [&] { return phase_ != Phase::connecting; }))
      throw NetworkError(prefix() + "connect() did not finish within " + ms_connect_ + " (the I/O thread is stuck)");
  }
  if (phase_ == Phase::connected) return;
  if (phase_ == Phase::failed) throw NetworkError(failure_, failure_cause_, failure_origin_);
  throw NetworkError(prefix() + "the transport was closed during connect()");
}

// The link connect() still waits for, if any: out to the successor, in from the
// predecessor, and with all_pairs both ways with every rank. I/O thread.
std::optional<std::pair<int, bool>> TcpTransport::missing_link() const {
  if (peers_[static_cast<std::size_t>(successor())].out == nullptr) return std::pair{successor(), true};
  if (peers_[static_cast<std::size_t>(predecessor())].in == nullptr) return std::pair{predecessor(), false};
  if (config_.all_pairs)
    for (int r = 0; r < config_.world; ++r) {
      if (r == config_.rank) continue;
      if (peers_[static_cast<std::size_t>(r)].out == nullptr) return std::pair{r, true};
      if (peers_[static_cast<std::size_t>(r)].in == nullptr) return std::pair{r, false};
    }
  return std::nullopt;
}

// Every link connect() waits for is present: the ring is up. I/O thread.
void TcpTransport::link_ready() {
  std::lock_guard lock(mu_);
  if (phase_ != Phase::connecting || missing_link()) return;
  phase_ = Phase::connected;
  cv_.notify_all();
}

// connect()'s deadline passed: say which link is missing, and what was turned away
// meanwhile (an operator looking for a misconfigured peer wants to see that). I/O thread.
void TcpTransport::connect_deadline_passed() {
  {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::connecting) return;
  }
  const auto missing = missing_link();
  if (!missing) return;
  const auto [peer, out] = *missing;
  const std::string who = (peer == successor() && out     ? "successor "
                           : peer == predecessor() && !out ? "predecessor "
                                                           : "") +
                          std::string("rank ") + std::to_string(peer);
  if (out)
    fail(FailureCause::peer_silent, peer, "could not connect to " + who + " within " + ms_connect_);
  else
    fail(FailureCause::peer_silent, peer, "no connection from " + who + " within " + ms_connect_);
}

// A link is up: file it and hand it the requests that were waiting for it. I/O thread.
void TcpTransport::add_link(std::unique_ptr<Link> link) {
  Link* l = link.get();
  links_.push_back(std::move(link));
  Peer& p = peers_[static_cast<std::size_t>(l->peer_rank())];
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::failed || phase_ == Phase::closed) {  // too late: tell it why
      const std::optional<ErrorInfo> e =
          phase_ == Phase::failed ? std::optional(ErrorInfo{failure_origin_, failure_cause_, failure_}) : std::nullopt;
      l->shutdown(failure_, e);
      return;
    }
  }
  logger("net")->info("connected {}", l->name());
  l->start();
  auto& waiting = l->dir() == Link::Dir::out ? p.waiting_out : p.waiting_in;
  (l->dir() == Link::Dir::out ? p.out : p.in) = l;
  for (auto& op : waiting) l->post(std::move(op));
  waiting.clear();
  link_ready();
}

// ---- accepting ---------------------------------------------------------------------------------

asio::awaitable<void> TcpTransport::accept_loop() {
  std::error_code ec;
  while (accepting_) {
    Socket socket(io_);
    co_await acceptor_.async_accept(socket, asio::redirect_error(kAwait, ec));
    if (!accepting_) co_return;
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      // EMFILE and friends: say so, back off briefly, keep serving.
      logger("net")->warn("{}accept failed: {}", prefix(), ec.message());
      asio::steady_timer pause(io_, std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::redirect_error(kAwait, ec));
      continue;
    }
    if (handshaking_.size() >= kMaxPendingHandshakes) {
      ++dropped_connections_;
      last_dropped_ = endpoint_text(socket, true) + ": too many handshakes in progress";
      logger("net")->warn("{}dropped a connection from {}", prefix(), last_dropped_);
      continue;  // the socket closes here
    }
    asio::co_spawn(io_, serve_incoming(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> TcpTransport::serve_incoming(Socket socket) {
  const std::string from = endpoint_text(socket, true);
  Stream stream = make_stream(std::move(socket), Role::acceptor);
  HandshakeResult r =
      co_await run_handshake(stream, handshake_params(Role::acceptor, predecessor(), LinkKind::ring, stream, from));
  const bool aborted = handshake_done(stream);  // ended by this rank giving up: nothing to report
  if (!accepting_ || (!r.ok() && aborted)) co_return;
  if (r.ok()) {
    const int peer = static_cast<int>(r.peer.rank);
    if (peers_[static_cast<std::size_t>(peer)].in != nullptr) {
      ++dropped_connections_;
      last_dropped_ = from + ": rank " + std::to_string(peer) + " is already connected";
      logger("net")->warn("{}dropped a second connection from rank {} ({})", prefix(), peer, from);
      co_return;
    }
    add_link(std::make_unique<Link>(std::move(stream), Link::Dir::in, config_.rank, peer, peer_name(peer, true), env_));
    co_return;
  }
  if (r.end == HandshakeEnd::mismatch) {  // an authenticated member of this ring disagrees
    fail(FailureCause::mismatch, static_cast<int>(r.peer.rank), "refused the connection from " + from + ": " + r.error);
    co_return;
  }
  // Never proved the token (or never spoke): not a member of this ring. Note it, go on.
  ++dropped_connections_;
  last_dropped_ = from + ": " + r.error;
  logger("net")->warn("{}dropped a connection from {}", prefix(), last_dropped_);
}

// ---- dialling ----------------------------------------------------------------------------------

asio::awaitable<void> TcpTransport::dial(int peer, LinkKind kind, Clock::time_point deadline) {
  const PeerAddress addr = addresses_[static_cast<std::size_t>(peer)];
  const std::string target = peer_name(peer, false) + " at " + addr.text();
  std::error_code ec;
  const auto endpoints = co_await resolve_endpoints(addr, ec);
  if (dial_aborted_) co_return;
  if (ec) {
    fail(FailureCause::local, config_.rank, "cannot resolve " + target + ": " + ec.message());
    co_return;
  }
  std::string last_error = "none";
  int attempts = 0;
  for (auto backoff = kFirstBackoff; !dial_aborted_; backoff = std::min<std::chrono::milliseconds>(backoff * 2, kMaxBackoff)) {
    for (const auto& ep : endpoints) {
      if (Clock::now() >= deadline) {
        fail(FailureCause::peer_silent, peer,
             "could not connect to " + target + " within " + ms_connect_ + " (" + std::to_string(attempts) +
                 " attempts, last error: " + last_error + ")");
        co_return;
      }
      ++attempts;
      Socket socket(io_);
      socket.open(ep.protocol(), ec);
      if (!ec) set_buffer_sizes(socket);
      Stream stream(std::move(socket));
      handshaking_[&stream] = Handshaking{target, nullptr};
      // The connect attempt is bounded by the handshake deadline too (a black-holed SYN).
      StreamDeadline guard(stream, config_.handshake_timeout);
      if (!ec) co_await stream.socket().async_connect(ep, asio::redirect_error(kAwait, ec));
      guard.disarm();
      if (dial_aborted_) {
        handshaking_.erase(&stream);
        co_return;
      }
      if (ec) {
        handshaking_.erase(&stream);
        last_error = ec.message();
        continue;
      }
      stream = make_stream(std::move(stream.socket()), Role::initiator);
      HandshakeResult r = co_await run_handshake(stream, handshake_params(Role::initiator, peer, kind, stream, target));
      handshake_done(stream);
      if (dial_aborted_) co_return;
      if (!r.ok()) {
        const FailureCause cause = r.end == HandshakeEnd::mismatch          ? FailureCause::mismatch
                                   : r.end == HandshakeEnd::unauthenticated ? FailureCause::auth
                                   : r.end == HandshakeEnd::timeout         ? FailureCause::peer_silent
                                   : r.end == HandshakeEnd::io              ? FailureCause::peer_closed
                                                                            : FailureCause::protocol;
        fail(cause, peer, "handshake with " + target + " failed: " + r.error);
        co_return;
      }
      add_link(std::make_unique<Link>(std::move(stream), Link::Dir::out, config_.rank, peer, peer_name(peer, false), env_));
      co_return;
    }
    backoff_timer_.expires_after(backoff);  // the peer may not be listening yet (cancelled on abort)
    co_await backoff_timer_.async_wait(asio::redirect_error(kAwait, ec));
    if (ec == asio::error::operation_aborted && !dial_aborted_) continue;  // another dial's cancel
  }
}

void TcpTransport::abort_connect_phase(const std::optional<ErrorInfo>& why) {
  dial_aborted_ = true;
  backoff_timer_.cancel();
  for (auto& [stream, h] : handshaking_) {
    h.aborted = true;
    if (h.abort && why) {
      *h.abort = why;
      stream->cancel();  // the handshake tells its peer why, then closes
    } else {
      stream->close();
    }
  }
}

}  // namespace ringattn::net::tcp
