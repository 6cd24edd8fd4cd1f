// The public message channel (ringattn/channel.hpp) on the ring's own TCP pieces: the
// stream (TLS or not), the handshake of net/handshake.hpp with link kind "control", the
// silence deadlines of net/tcp/stream_deadline.hpp.
#include "ringattn/channel.hpp"

#include <asio/connect.hpp>
#include <asio/steady_timer.hpp>
#include <asio/ssl/context.hpp>
#include <algorithm>
#include <array>

#include "ringattn/byte_order.hpp"
#include "net/tcp/coroutines.hpp"
#include "net/tcp/handshake_io.hpp"
#include "net/tcp/resolve.hpp"
#include "net/tcp/socket_options.hpp"
#include "net/tcp/stream_deadline.hpp"
#include "net/tcp/tls.hpp"
#include "ringattn/error.hpp"

namespace ringattn {
namespace {

using Millis = std::chrono::milliseconds;
using net::tcp::Stream;
using net::tcp::StreamDeadline;
constexpr std::uint32_t kMagic = 0x54434152;  // "RACT" in little-endian bytes
constexpr std::size_t kHeadBytes = 16;
constexpr std::size_t kChunk = std::size_t{1} << 20;

[[noreturn]] void broken(const std::string& peer, const std::string& what, const std::error_code& ec, bool timed_out,
                         Millis idle) {
  if (timed_out)
    throw NetworkError(peer + ": " + what + ": nothing for " + std::to_string(idle.count() / 1000.0).substr(0, 5) +
                           " s (the other side is stopped, gone or the network is down)",
                       FailureCause::peer_silent);
  if (ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe)
    throw NetworkError(peer + ": " + what + ": the connection was closed", FailureCause::peer_closed);
  throw NetworkError(peer + ": " + what + ": " + ec.message(), FailureCause::local);
}

std::array<std::byte, kHeadBytes> encode_head(ChannelMessage t, std::uint64_t length) {
  std::array<std::byte, kHeadBytes> h{};
  put_le<std::uint32_t>(h.data(), kMagic);
  put_le<std::uint8_t>(h.data() + 4, static_cast<std::uint8_t>(t));
  put_le<std::uint64_t>(h.data() + 8, length);
  return h;
}

}  // namespace

struct Channel::Impl {
  std::unique_ptr<Stream> stream;
  std::shared_ptr<asio::ssl::context> tls;  // outlives the stream's TLS session
  std::string secret;
  std::string peer;
  Millis idle{30000};

  // The deadline measures silence: it restarts whenever any bytes move, so a slow but
  // steady peer is never cut off, and one that moves nothing for `idle` always is.
  template <class Bytes, class Step>
  asio::awaitable<void> move_all(Bytes bytes, const char* what, const ChannelProgress& progress, Step step) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const std::size_t n = std::min(kChunk, bytes.size() - done);
      std::error_code ec;
      StreamDeadline deadline(*stream, idle);
      const std::size_t moved = co_await step(bytes.subspan(done, n), ec);
      if (ec) broken(peer, what, ec, deadline.fired(), idle);
      done += moved;
      if (progress) progress(done);
    }
  }
  asio::awaitable<void> write_all(std::span<const std::byte> bytes, const char* what, const ChannelProgress& progress = {}) {
    co_await move_all(bytes, what, progress, [this](std::span<const std::byte> b, std::error_code& ec) {
      return stream->async_write_some(asio::buffer(b.data(), b.size()), asio::redirect_error(asio::use_awaitable, ec));
    });
  }
  asio::awaitable<void> read_all(std::span<std::byte> bytes, const char* what, const ChannelProgress& progress = {}) {
    co_await move_all(bytes, what, progress, [this](std::span<std::byte> b, std::error_code& ec) {
      return stream->async_read_some(asio::buffer(b.data(), b.size()), asio::redirect_error(asio::use_awaitable, ec));
    });
  }
};

Channel::Channel() = default;

Channel::Impl& Channel::live() const {
  if (!impl_ || !impl_->stream)
    throw Error("ringattn::Channel: not connected (use Channel::connect or ChannelListener::accept)");
  return *impl_;
}
Channel::Channel(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Channel::~Channel() = default;
Channel::Channel(const Channel&) = default;
Channel& Channel::operator=(const Channel&) = default;
Channel::Channel(Channel&&) noexcept = default;
Channel& Channel::operator=(Channel&&) noexcept = default;

const std::string& Channel::peer() const {
  static const std::string none = "(not connected)";
  return impl_ ? impl_->peer : none;
}
Millis Channel::idle() const { return impl_ ? impl_->idle : Millis(0); }
void Channel::set_idle(Millis idle) {
  if (impl_) impl_->idle = idle;
}

asio::awaitable<void> Channel::write_json(const std::string& json) {
  Impl& im = live();
  if (json.size() > kMaxChannelJson)
    throw Error("ringattn::Channel: a JSON message of " + std::to_string(json.size()) + " bytes exceeds the limit of " +
                std::to_string(kMaxChannelJson));
  const auto head = encode_head(ChannelMessage::json, json.size());
  co_await im.write_all(head, "sending a message");
  co_await im.write_all(std::as_bytes(std::span(json.data(), json.size())), "sending a message");
}

asio::awaitable<void> Channel::write_tensor(std::span<const std::byte> bytes, const ChannelProgress& progress) {
  std::vector<std::span<const std::byte>> parts{bytes};
  co_await write_tensor(std::move(parts), progress);
}

asio::awaitable<void> Channel::write_tensor(std::vector<std::span<const std::byte>> parts, const ChannelProgress& progress) {
  Impl& im = live();
  std::uint64_t total = 0;
  for (const auto& p : parts) total += p.size();
  const auto head = encode_head(ChannelMessage::tensor, total);
  co_await im.write_all(head, "sending a tensor");
  std::uint64_t before = 0;
  for (const auto& p : parts) {
    co_await im.write_all(p, "sending a tensor", [&](std::uint64_t done) {
      if (progress) progress(before + done);
    });
    before += p.size();
  }
}

asio::awaitable<void> Channel::write_bytes(std::span<const std::byte> bytes) {
  co_await live().write_all(bytes, "sending bytes");
}

asio::awaitable<ChannelHead> Channel::read_head() {
  Impl& im = live();
  std::array<std::byte, kHeadBytes> h{};
  co_await im.read_all(h, "waiting for a message");
  if (get_le<std::uint32_t>(h.data()) != kMagic)
    throw NetworkError(im.peer + ": not a ringattn control message (bad magic)", FailureCause::protocol);
  const auto type = get_le<std::uint8_t>(h.data() + 4);
  if (type != 1 && type != 2)
    throw NetworkError(im.peer + ": unknown control message type " + std::to_string(type), FailureCause::protocol);
  for (std::size_t i = 5; i < 8; ++i)
    if (h[i] != std::byte{0})
      throw NetworkError(im.peer + ": control message reserved bytes are not zero", FailureCause::protocol);
  co_return ChannelHead{static_cast<ChannelMessage>(type), get_le<std::uint64_t>(h.data() + 8)};
}

asio::awaitable<std::string> Channel::read_json(const ChannelHead& h) {
  Impl& im = live();
  if (h.type != ChannelMessage::json)
    throw NetworkError(im.peer + ": expected a JSON message, got a tensor of " + std::to_string(h.length) + " bytes",
                       FailureCause::protocol);
  if (h.length > kMaxChannelJson)
    throw NetworkError(im.peer + ": a JSON message of " + std::to_string(h.length) + " bytes exceeds the limit of " +
                           std::to_string(kMaxChannelJson),
                       FailureCause::protocol);
  std::string text(h.length, '\0');
  co_await im.read_all(std::as_writable_bytes(std::span(text.data(), text.size())), "reading a message");
  co_return text;
}

asio::awaitable<std::string> Channel::read_json() {
  const ChannelHead h = co_await read_head();
  co_return co_await read_json(h);
}

asio::awaitable<void> Channel::read_tensor(const ChannelHead& h, std::span<std::byte> into, const ChannelProgress& progress) {
  Impl& im = live();
  if (h.type != ChannelMessage::tensor)
    throw NetworkError(im.peer + ": expected a tensor, got a JSON message", FailureCause::protocol);
  if (h.length != into.size())
    throw NetworkError(im.peer + ": a tensor of " + std::to_string(h.length) + " bytes where the request implies " +
                           std::to_string(into.size()),
                       FailureCause::protocol);
  co_await im.read_all(into, "reading a tensor", progress);
}

asio::awaitable<void> Channel::read_tensor(std::span<std::byte> into, const ChannelProgress& progress) {
  const ChannelHead h = co_await read_head();
  co_await read_tensor(h, into, progress);
}

asio::awaitable<std::string> Channel::wait_closed() {
  Impl& im = live();
  std::byte b[1];
  std::error_code ec;
  co_await im.stream->async_read_some(asio::buffer(b), asio::redirect_error(asio::use_awaitable, ec));
  co_return ec ? ec.message() : std::string("it sent data");
}

void Channel::close() {
  if (impl_ && impl_->stream) impl_->stream->close();
}

asio::awaitable<std::string> Channel::authenticate(Millis deadline) {
  Impl& im = live();
  net::tcp::HandshakeParams p;
  p.ours = net::control_hello(false);
  p.role = net::Role::acceptor;
  p.expected_rank = 1;
  p.secret = im.secret;
  p.peer_name = im.peer;
  p.accept = [](net::LinkKind k) { return k == net::LinkKind::control ? std::optional<std::uint32_t>(1) : std::nullopt; };
  p.deadline = deadline;
  const auto r = co_await net::tcp::run_handshake(*im.stream, p);
  co_return r.ok() ? std::string() : r.error;
}

namespace {

// Connects within `timeout` (a timer closes the socket when it passes).
asio::awaitable<net::tcp::Socket> dial(const std::string& address, const std::string& peer, Millis timeout) {
  const auto addr = net::parse_peer_address(address, "--to");
  auto ex = co_await asio::this_coro::executor;
  std::error_code ec;
  const auto endpoints = co_await net::tcp::resolve_endpoints(addr, ec);
  if (ec || endpoints.empty())
    throw NetworkError(peer + ": cannot resolve '" + addr.host + "': " + ec.message(), FailureCause::local);
  net::tcp::Socket socket(ex);
  asio::steady_timer timer(ex, timeout);
  bool fired = false;
  timer.async_wait([&](std::error_code e) {
    if (!e) {
      fired = true;
      std::error_code ignored;
      socket.close(ignored);
    }
  });
  co_await asio::async_connect(socket, endpoints, asio::redirect_error(asio::use_awaitable, ec));
  timer.cancel();
  if (ec)
    throw NetworkError(peer + ": cannot connect: " + (fired ? std::string("timed out") : ec.message()) +
                           " (is `ringattn serve` running there, with --control at this address?)",
                       FailureCause::local);
  net::tcp::set_no_delay(socket);
  co_return socket;
}

}  // namespace

asio::awaitable<Channel> Channel::connect(std::string address, ChannelOptions options) {
  auto im = std::make_shared<Impl>();
  im->peer = "daemon at " + address;
  im->idle = options.idle;
  im->secret = std::move(options.secret);
  net::tcp::Socket socket = co_await dial(address, im->peer, options.idle);
  if (options.tls) {
    im->tls = net::tcp::make_tls_context(im->secret, net::tcp::TlsRole::client);
    im->stream = std::make_unique<Stream>(std::make_unique<net::tcp::TlsStream>(std::move(socket), *im->tls));
  } else {
    im->stream = std::make_unique<Stream>(std::move(socket));
  }
  net::tcp::HandshakeParams p;
  p.ours = net::control_hello(true);
  p.role = net::Role::initiator;
  p.expected_rank = 0;
  p.secret = im->secret;
  p.peer_name = im->peer;
  p.deadline = options.idle;
  const auto r = co_await net::tcp::run_handshake(*im->stream, p);
  if (!r.ok())
    throw NetworkError(im->peer + ": " + r.error +
                           (r.end == net::tcp::HandshakeEnd::unauthenticated
                                ? " (the client needs the daemons' token: --token-file or RINGATTN_TOKEN)"
                                : " (a daemon with --tls needs clients with --tls, and one without, clients without)"),
                       FailureCause::auth);
  co_return Channel(std::move(im));
}

struct ChannelListener::Impl {
  asio::ip::tcp::acceptor acceptor;
  ChannelOptions options;
  std::shared_ptr<asio::ssl::context> tls;
};

ChannelListener::ChannelListener(asio::any_io_executor executor, const std::string& listen, ChannelOptions options,
                                 const std::string& what)
    : impl_(new Impl{listen_tcp(executor, listen, what), std::move(options), nullptr}) {
  if (impl_->options.tls) impl_->tls = net::tcp::make_tls_context(impl_->options.secret, net::tcp::TlsRole::server);
}

ChannelListener::~ChannelListener() = default;

std::uint16_t ChannelListener::port() const {
  std::error_code ec;
  const auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void ChannelListener::close() {
  std::error_code ignored;
  impl_->acceptor.close(ignored);
}

asio::awaitable<std::optional<Channel>> ChannelListener::accept() {
  for (;;) {
    net::tcp::Socket socket(impl_->acceptor.get_executor());
    std::error_code ec;
    co_await impl_->acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !impl_->acceptor.is_open()) co_return std::nullopt;
    if (ec) {  // out of descriptors, say: pause rather than spin
      asio::steady_timer pause(impl_->acceptor.get_executor(), Millis(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    net::tcp::set_no_delay(socket);
    auto im = std::make_shared<Channel::Impl>();
    im->peer = "client " + remote_text(socket);
    im->idle = impl_->options.idle;
    im->secret = impl_->options.secret;
    im->tls = impl_->tls;
    im->stream = im->tls ? std::make_unique<Stream>(std::make_unique<net::tcp::TlsStream>(std::move(socket), *im->tls))
                         : std::make_unique<Stream>(std::move(socket));
    co_return Channel(std::move(im));
  }
}

asio::ip::tcp::acceptor listen_tcp(asio::any_io_executor executor, const std::string& listen, const std::string& what) {
  const auto addr = net::parse_peer_address(listen, what);
  std::error_code ec;
  std::vector<asio::ip::tcp::endpoint> endpoints;
  if (const auto ip = asio::ip::make_address(addr.host, ec); !ec) {
    endpoints.emplace_back(ip, addr.port);
  } else {
    asio::ip::tcp::resolver resolver(executor);
    for (const auto& e : resolver.resolve(addr.host, std::to_string(addr.port), ec)) endpoints.push_back(e.endpoint());
    if (ec || endpoints.empty())
      throw NetworkError(what + ": cannot resolve '" + addr.host + "' in " + listen + ": " + ec.message() +
                         "; give a numeric address such as 127.0.0.1:" + std::to_string(addr.port));
  }
  asio::ip::tcp::acceptor acceptor(executor);
  for (const auto& ep : endpoints) {
    std::error_code ignored;
    acceptor.close(ignored);
    net::tcp::open_acceptor(acceptor, ep, /*large_buffers=*/false, ec);
    if (!ec) break;
  }
  if (ec)
    throw NetworkError(what + ": cannot listen on " + listen + ": " + ec.message() +
                       (ec == asio::error::address_in_use
                            ? " (another process holds the port: give each daemon on a host its own port, or turn it off)"
                            : " (check that the address is one of this host's)"));
  return acceptor;
}

std::string remote_text(const asio::ip::tcp::socket& socket) { return net::tcp::endpoint_text(socket, true); }

}  // namespace ringattn
