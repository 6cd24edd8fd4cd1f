// The rendezvous (rendezvous.hpp): a small server and its client, on the handshake and
// control frames the ring's links use.
#include "net/tcp/rendezvous.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/detached.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "core/logger.hpp"
#include "ringattn/split.hpp"
#include "net/tcp/control_io.hpp"
#include "net/tcp/coroutines.hpp"
#include "net/tcp/resolve.hpp"
#include "net/tcp/stream_deadline.hpp"
#include "net/tcp/handshake_io.hpp"
#include "ringattn/error.hpp"

namespace ringattn::net::tcp {
namespace {

constexpr auto kAwait = asio::use_awaitable;
using Clock = std::chrono::steady_clock;

Hello rendezvous_hello(const RendezvousConfig& c, int rank) {
  return make_hello(c.ring_id, rank, c.world, LinkKind::rendezvous, c.limits);
}

std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

}  // namespace

// ---- server --------------------------------------------------------------------------------------

struct RendezvousServer::Impl {
  RendezvousConfig cfg;
  asio::io_context io;
  Acceptor acceptor{io};
  asio::steady_timer deadline{io};
  std::vector<std::optional<std::string>> addresses;  // by rank
  std::vector<std::shared_ptr<Stream>> members;       // registered, waiting for the list
  int registered = 0;
  bool ended = false;
  std::uint16_t port = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::string> outcome;  // set when the rendezvous ended
  std::thread thread;

  asio::awaitable<void> accept_loop() {
    std::error_code ec;
    while (!ended) {
      Socket socket(io);
      co_await acceptor.async_accept(socket, asio::redirect_error(kAwait, ec));
      if (ended || ec == asio::error::operation_aborted) co_return;
      if (ec) continue;
      asio::co_spawn(io, serve(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> serve(Socket socket) {
    const std::string from = endpoint_text(socket, true);
    set_no_delay(socket);
    auto stream = std::make_shared<Stream>(std::move(socket));
    HandshakeParams p;
    p.ours = rendezvous_hello(cfg, 0);
    p.role = Role::acceptor;
    p.expected_rank = kAnyRank;
    p.secret = cfg.secret;
    p.peer_name = from;
    p.deadline = cfg.handshake_timeout;
    p.accept = [](LinkKind k) -> std::optional<std::uint32_t> {
      return k == LinkKind::rendezvous ? std::optional<std::uint32_t>(kAnyRank) : std::nullopt;
    };
    const HandshakeResult r = co_await run_handshake(*stream, p);
    if (!r.ok()) {
      logger("net")->warn("rendezvous: dropped a connection from {}: {}", from, r.error);
      co_return;
    }
    // The ADDRESS, under the rest of the handshake's deadline.
    StreamDeadline guard(*stream, cfg.handshake_timeout);
    ControlFrame f = co_await read_control(*stream);
    guard.disarm();
    if (ended) co_return;
    const int rank = static_cast<int>(r.peer.rank);
    if (!f.error.empty() || f.header.kind != FrameKind::address) {
      logger("net")->warn("rendezvous: rank {} ({}) sent no address: {}", rank, from,
                          f.error.empty() ? "a " + std::string(to_string(f.header.kind)) + " frame" : f.error);
      co_return;
    }
    if (addresses[static_cast<std::size_t>(rank)]) {
      co_await send_error(*stream, FailureCause::mismatch, rank,
                          "the rendezvous refused rank " + std::to_string(rank) + " from " + from +
                              ": that rank already registered (" + *addresses[static_cast<std::size_t>(rank)] +
                              "); two processes were started as rank " + std::to_string(rank));
      co_return;
    }
    addresses[static_cast<std::size_t>(rank)] = error_text(f.payload);
    members.push_back(stream);
    if (++registered == cfg.world) finish("");
  }

  // Every rank registered (error empty): the list to all; else why not, blaming `origin`.
  void finish(const std::string& error, int origin = -1) {
    if (ended) return;
    ended = true;
    deadline.cancel();
    std::error_code ignored;
    acceptor.close(ignored);
    std::string list;
    if (error.empty())
      for (const auto& a : addresses) list += (list.empty() ? "" : ",") + *a;
    for (auto& m : members) {
      asio::co_spawn(io, [m, list, error, origin]() -> asio::awaitable<void> {
        if (error.empty()) co_await write_control(*m, FrameKind::peers, bytes(list));
        else co_await send_error(*m, FailureCause::peer_silent, origin, error);
        m->shutdown_send();
        m->close();
      }, asio::detached);
    }
    {
      std::lock_guard lock(mu);
      outcome = error;
    }
    cv.notify_all();
  }
};

RendezvousServer::RendezvousServer(const PeerAddress& listen, const RendezvousConfig& config)
    : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.cfg = config;
  im.addresses.resize(static_cast<std::size_t>(config.world));
  std::error_code ec;
  asio::ip::address addr = asio::ip::make_address(listen.host, ec);
  if (ec) {  // a name: listen where it resolves
    asio::ip::tcp::resolver resolver(im.io);
    const auto results = resolver.resolve(listen.host, std::to_string(listen.port), ec);
    if (ec || results.empty()) throw NetworkError("rendezvous: cannot resolve '" + listen.host + "': " + ec.message());
    addr = results.begin()->endpoint().address();
  }
  const asio::ip::tcp::endpoint ep(addr, listen.port);
  open_acceptor(im.acceptor, ep, /*large_buffers=*/false, ec);
  if (ec) throw NetworkError("rendezvous: cannot listen on " + listen.text() + ": " + ec.message());
  im.port = im.acceptor.local_endpoint().port();
  im.deadline.expires_after(config.timeout);
  im.deadline.async_wait([&im](std::error_code e) {
    if (e) return;
    std::string missing;
    int first = -1;
    for (std::size_t r = 0; r < im.addresses.size(); ++r)
      if (!im.addresses[r]) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        if (first < 0) first = static_cast<int>(r);
      }
    im.finish("no connection from rank " + missing + " within " + seconds_text(im.cfg.timeout) + ": the rendezvous heard from " +
                  std::to_string(im.registered) + " of " + std::to_string(im.cfg.world) + " ranks",
              first);
  });
  asio::co_spawn(im.io, im.accept_loop(), asio::detached);
  im.thread = std::thread([&im] { im.io.run(); });
}

RendezvousServer::~RendezvousServer() {
  auto& im = *impl_;
  asio::post(im.io, [p = &im] { p->finish("the rendezvous was stopped"); });
  // The last writes (the list, or an ERROR) are small; give them a moment, then stop.
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (!im.io.stopped() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  im.io.stop();
  im.thread.join();
}

std::uint16_t RendezvousServer::port() const { return impl_->port; }

std::string RendezvousServer::wait() {
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return impl_->outcome.has_value(); });
  return *impl_->outcome;
}

// ---- client --------------------------------------------------------------------------------------

std::vector<PeerAddress> rendezvous(const PeerAddress& master, int rank, const PeerAddress& self,
                                    const RendezvousConfig& config) {
  asio::io_context io;
  const auto deadline = Clock::now() + config.timeout;
  const std::string where = "the rendezvous at " + master.text();
  std::string error;
  std::string list;
  ErrorInfo refused{0, FailureCause::peer_silent, ""};  // what the server said, if it refused
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    std::error_code ec;
    const auto endpoints = co_await resolve_endpoints(master, ec);
    if (ec) {
      error = "cannot resolve " + where + ": " + ec.message();
      co_return;
    }
    // The master may not listen yet (rank 0 starting up): retry until the deadline.
    Socket socket(io);
    std::string last = "none";
    asio::steady_timer pause(io);
    for (auto backoff = kFirstBackoff; Clock::now() < deadline; backoff = std::min(backoff * 2, kMaxBackoff)) {
      for (const auto& ep : endpoints) {
        socket = Socket(io);
        co_await socket.async_connect(ep, asio::redirect_error(kAwait, ec));
        if (!ec) break;
        last = ec.message();
      }
      if (!ec && socket.is_open()) break;
      pause.expires_after(backoff);
      co_await pause.async_wait(asio::redirect_error(kAwait, ec));
      ec = asio::error::not_connected;
    }
    if (ec || !socket.is_open()) {
      error = "could not reach " + where + " within " + seconds_text(config.timeout) + " (last error: " + last + ")";
      co_return;
    }
    set_no_delay(socket);
    Stream stream(std::move(socket));
    StreamDeadline guard(stream, deadline);  // everything below ends by the deadline
    HandshakeParams p;
    p.ours = rendezvous_hello(config, rank);
    p.role = Role::initiator;
    p.expected_rank = 0;
    p.secret = config.secret;
    p.peer_name = where;
    p.deadline = config.handshake_timeout;
    const HandshakeResult r = co_await run_handshake(stream, p);
    if (!r.ok()) {
      error = "handshake with " + where + " failed: " + r.error;
      co_return;
    }
    const std::string mine = self.text();
    if ((ec = co_await write_control(stream, FrameKind::address, bytes(mine)))) {
      error = "sending this rank's address to " + where + ": " + ec.message();
      co_return;
    }
    ControlFrame f = co_await read_control(stream);
    guard.disarm();
    if (!f.error.empty())
      error = where + " did not answer with the ranks' addresses within " + seconds_text(config.timeout) + " (" + f.error + ")";
    else if (f.header.kind == FrameKind::error) {
      refused = decode_error(f.payload);
      error = where + ": " + refused.text;
    }
    else if (f.header.kind != FrameKind::peers)
      error = where + " sent a " + std::string(to_string(f.header.kind)) + " frame instead of the ranks' addresses";
    else
      list = error_text(f.payload);
  }, asio::detached);
  io.run_for(config.timeout + std::chrono::seconds(5));
  const std::string who = "rank " + std::to_string(rank) + ": ";
  if (!error.empty())
    throw NetworkError(who + error, refused.cause == FailureCause::unknown ? FailureCause::peer_silent : refused.cause,
                       refused.origin);
  if (list.empty()) throw NetworkError(who + where + " did not answer in time", FailureCause::peer_silent, 0);
  std::vector<PeerAddress> out;
  for (const std::string& item : split_commas(list))
    out.push_back(parse_peer_address(item, who + "an address from " + where));
  if (static_cast<int>(out.size()) != config.world)
    throw NetworkError(who + where + " sent " + std::to_string(out.size()) + " addresses for " + std::to_string(config.world) + " ranks",
                       FailureCause::protocol, 0);
  return out;
}

std::string local_address_towards(const PeerAddress& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(peer.host.c_str(), std::to_string(peer.port).c_str(), &hints, &res); rc != 0 || !res)
    throw NetworkError("cannot resolve '" + peer.host + "': " + ::gai_strerror(rc));
  const int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::string out;
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    char host[NI_MAXHOST];
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0)
      out = host;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  if (out.empty()) throw NetworkError("no route to " + peer.text() + " from this machine");
  return out;
}

}  // namespace ringattn::net::tcp
