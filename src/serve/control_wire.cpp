#include "src/serve/control_wire.hpp"

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <algorithm>
#include <array>
#include <cstdlib>

#include "core/byte_order.hpp"
#include "ringattn/launch.hpp"
#include "net/tcp/coroutines.hpp"
#include "net/tcp/handshake_io.hpp"
#include "net/tcp/resolve.hpp"
#include "net/tcp/stream_deadline.hpp"
#include "net/tcp/tls.hpp"
#include "ringattn/error.hpp"

namespace ringattn::serve {
namespace {

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

asio::awaitable<void> write_all(Stream& s, std::span<const std::byte> bytes, Millis idle, const std::string& peer,
                                const char* what, const std::function<void(std::uint64_t)>& progress = {}) {
  // The deadline measures silence: it restarts whenever any bytes move, so a slow but
  // steady peer is never cut off, and one that moves nothing for `idle` always is.
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t n = std::min(kChunk, bytes.size() - done);
    std::error_code ec;
    StreamDeadline deadline(s, idle);
    const std::size_t moved =
        co_await s.async_write_some(asio::buffer(bytes.data() + done, n), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) broken(peer, what, ec, deadline.fired(), idle);
    done += moved;
    if (progress) progress(done);
  }
}

asio::awaitable<void> read_all(Stream& s, std::span<std::byte> bytes, Millis idle, const std::string& peer,
                               const char* what, const std::function<void(std::uint64_t)>& progress = {}) {
  std::size_t done = 0;  // silence, as in write_all
  while (done < bytes.size()) {
    const std::size_t n = std::min(kChunk, bytes.size() - done);
    std::error_code ec;
    StreamDeadline deadline(s, idle);
    const std::size_t moved =
        co_await s.async_read_some(asio::buffer(bytes.data() + done, n), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) broken(peer, what, ec, deadline.fired(), idle);
    done += moved;
    if (progress) progress(done);
  }
}

std::array<std::byte, kHeadBytes> encode_head(MessageType t, std::uint64_t length) {
  std::array<std::byte, kHeadBytes> h{};
  put_le<std::uint32_t>(h.data(), kMagic);
  put_le<std::uint8_t>(h.data() + 4, static_cast<std::uint8_t>(t));
  put_le<std::uint64_t>(h.data() + 8, length);
  return h;
}

}  // namespace

asio::awaitable<void> write_json(Stream& s, const std::string& json, Millis idle, const std::string& peer) {
  if (json.size() > kMaxJsonBytes) throw Error("internal: a control message of " + std::to_string(json.size()) + " bytes");
  const auto head = encode_head(MessageType::json, json.size());
  co_await write_all(s, head, idle, peer, "sending a message");
  co_await write_all(s, std::as_bytes(std::span(json.data(), json.size())), idle, peer, "sending a message");
}

asio::awaitable<void> write_tensor_parts(Stream& s, std::vector<std::span<const std::byte>> parts, Millis idle,
                                         const std::string& peer, const std::function<void(std::uint64_t)>& progress) {
  std::uint64_t total = 0;
  for (const auto& p : parts) total += p.size();
  const auto head = encode_head(MessageType::tensor, total);
  co_await write_all(s, head, idle, peer, "sending a tensor");
  std::uint64_t before = 0;
  for (const auto& p : parts) {
    co_await write_all(s, p, idle, peer, "sending a tensor", [&](std::uint64_t done) {
      if (progress) progress(before + done);
    });
    before += p.size();
  }
}

asio::awaitable<void> write_tensor(Stream& s, std::span<const std::byte> bytes, Millis idle, const std::string& peer,
                                   const std::function<void(std::uint64_t)>& progress) {
  const auto head = encode_head(MessageType::tensor, bytes.size());
  co_await write_all(s, head, idle, peer, "sending a tensor");
  co_await write_all(s, bytes, idle, peer, "sending a tensor", progress);
}

asio::awaitable<MessageHead> read_head(Stream& s, Millis idle, const std::string& peer) {
  std::array<std::byte, kHeadBytes> h{};
  co_await read_all(s, h, idle, peer, "waiting for a message");
  if (get_le<std::uint32_t>(h.data()) != kMagic)
    throw NetworkError(peer + ": not a ringattn control message (bad magic)", FailureCause::protocol);
  const auto type = get_le<std::uint8_t>(h.data() + 4);
  if (type != 1 && type != 2)
    throw NetworkError(peer + ": unknown control message type " + std::to_string(type), FailureCause::protocol);
  for (int i = 5; i < 8; ++i)
    if (h[static_cast<std::size_t>(i)] != std::byte{0})
      throw NetworkError(peer + ": control message reserved bytes are not zero", FailureCause::protocol);
  co_return MessageHead{static_cast<MessageType>(type), get_le<std::uint64_t>(h.data() + 8)};
}

asio::awaitable<std::string> read_json_body(Stream& s, const MessageHead& h, Millis idle, const std::string& peer) {
  if (h.type != MessageType::json)
    throw NetworkError(peer + ": expected a JSON message, got a tensor of " + std::to_string(h.length) + " bytes",
                       FailureCause::protocol);
  if (h.length > kMaxJsonBytes)
    throw NetworkError(peer + ": a JSON message of " + std::to_string(h.length) + " bytes exceeds the limit of " +
                           std::to_string(kMaxJsonBytes),
                       FailureCause::protocol);
  std::string text(h.length, '\0');
  co_await read_all(s, std::as_writable_bytes(std::span(text.data(), text.size())), idle, peer, "reading a message");
  co_return text;
}

asio::awaitable<std::string> read_json(Stream& s, Millis idle, const std::string& peer) {
  const MessageHead h = co_await read_head(s, idle, peer);
  co_return co_await read_json_body(s, h, idle, peer);
}

asio::awaitable<void> read_tensor_body(Stream& s, const MessageHead& h, std::span<std::byte> into, Millis idle,
                                       const std::string& peer, const std::function<void(std::uint64_t)>& progress) {
  if (h.type != MessageType::tensor)
    throw NetworkError(peer + ": expected a tensor, got a JSON message", FailureCause::protocol);
  if (h.length != into.size())
    throw NetworkError(peer + ": a tensor of " + std::to_string(h.length) + " bytes where the request implies " +
                           std::to_string(into.size()),
                       FailureCause::protocol);
  co_await read_all(s, into, idle, peer, "reading a tensor", progress);
}

asio::awaitable<void> read_tensor(Stream& s, std::span<std::byte> into, Millis idle, const std::string& peer,
                                  const std::function<void(std::uint64_t)>& progress) {
  const MessageHead h = co_await read_head(s, idle, peer);
  co_await read_tensor_body(s, h, into, idle, peer, progress);
}

std::string client_secret(const std::optional<std::string>& token_file) {
  if (token_file) return load_token(*token_file);
  if (const char* f = std::getenv("RINGATTN_TOKEN_FILE"); f && *f && !std::getenv("RINGATTN_TOKEN")) return load_token(f);
  return load_token("");
}

asio::awaitable<ClientConnection> connect_control(std::string address, std::string secret, bool tls, Millis timeout) {
  const auto addr = net::parse_peer_address(address, "--to");
  ClientConnection c;
  c.peer = "daemon at " + address;
  auto ex = co_await asio::this_coro::executor;
  std::error_code ec;
  const auto endpoints = co_await net::tcp::resolve_endpoints(addr, ec);
  if (ec || endpoints.empty())
    throw NetworkError(c.peer + ": cannot resolve '" + addr.host + "': " + ec.message(), FailureCause::local);
  net::tcp::Socket socket(ex);
  {
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
      throw NetworkError(c.peer + ": cannot connect: " + (fired ? std::string("timed out") : ec.message()) +
                             " (is `ringattn serve` running there, with --control at this address?)",
                         FailureCause::local);
  }
  net::tcp::set_no_delay(socket);
  if (tls) {
    auto ctx = net::tcp::make_tls_context(secret, net::tcp::TlsRole::client);
    c.stream = std::make_unique<Stream>(std::make_unique<net::tcp::TlsStream>(std::move(socket), *ctx));
    c.tls_context = ctx;
  } else {
    c.stream = std::make_unique<Stream>(std::move(socket));
  }
  net::tcp::HandshakeParams p;
  p.ours = net::control_hello(true);
  p.role = net::Role::initiator;
  p.expected_rank = 0;
  p.secret = secret;
  p.peer_name = c.peer;
  p.deadline = timeout;
  const auto r = co_await net::tcp::run_handshake(*c.stream, p);
  if (!r.ok())
    throw NetworkError(c.peer + ": " + r.error +
                           (r.end == net::tcp::HandshakeEnd::unauthenticated
                                ? " (the client needs the daemons' token: --token-file or RINGATTN_TOKEN)"
                                : " (a daemon with --tls needs clients with --tls, and one without, clients without)"),
                       FailureCause::auth);
  co_return c;
}

}  // namespace ringattn::serve
