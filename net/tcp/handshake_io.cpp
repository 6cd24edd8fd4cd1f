// HELLO + AUTH over a socket (protocol in net/handshake.hpp).
#include "net/tcp/handshake_io.hpp"

#include <array>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <vector>

#include "net/crc32c.hpp"
#include "net/secret.hpp"
#include "net/tcp/coroutines.hpp"

namespace ringattn::net::tcp {
namespace {

constexpr auto kAwait = asio::use_awaitable;

asio::awaitable<std::error_code> write_control(Socket& s, FrameKind kind, std::span<const std::byte> payload) {
  FrameHeader h;
  h.kind = kind;
  h.payload_bytes = payload.size();
  h.payload_crc = crc32c(payload);
  const HeaderBytes hb = encode_header(h);
  const std::array<asio::const_buffer, 2> frame{asio::buffer(hb), asio::buffer(payload.data(), payload.size())};
  std::error_code ec;
  co_await asio::async_write(s, frame, asio::redirect_error(kAwait, ec));
  co_return ec;
}

asio::awaitable<void> send_error(Socket& s, const std::string& text) {
  const std::string t = text.substr(0, kMaxErrorBytes);
  co_await write_control(s, FrameKind::error, std::as_bytes(std::span(t.data(), t.size())));
  std::error_code ignored;
  s.shutdown(asio::socket_base::shutdown_send, ignored);
}

struct ControlFrame {
  FrameHeader header;
  std::vector<std::byte> payload;  // at most kMaxErrorBytes: bounded by the handshake limits
  std::string error;               // empty on success
  bool protocol_seen = false;      // the header had our magic
};

asio::awaitable<ControlFrame> read_control(Socket& s) {
  ControlFrame f;
  HeaderBytes hb{};
  std::error_code ec;
  co_await asio::async_read(s, asio::buffer(hb), asio::redirect_error(kAwait, ec));
  if (ec) {
    f.error = ec == asio::error::eof ? "the peer closed the connection during the handshake" : ec.message();
    co_return f;
  }
  f.protocol_seen = hb[0] == std::byte{'R'} && hb[1] == std::byte{'A'} && hb[2] == std::byte{'T'} && hb[3] == std::byte{'N'};
  f.error = try_decode_header(hb, FrameLimits::handshake_only(), f.header);
  if (!f.error.empty()) co_return f;
  f.payload.resize(static_cast<std::size_t>(f.header.payload_bytes));
  co_await asio::async_read(s, asio::buffer(f.payload), asio::redirect_error(kAwait, ec));
  if (ec) {
    f.error = "reading a " + std::string(to_string(f.header.kind)) + " payload: " + ec.message();
    co_return f;
  }
  if (crc32c(f.payload) != f.header.payload_crc)
    f.error = "payload CRC32C mismatch on a " + std::string(to_string(f.header.kind)) + " frame";
  co_return f;
}

// Tells the peer why, then fails.
asio::awaitable<HandshakeResult> refuse(Socket& s, const std::string& me, std::string error) {
  co_await send_error(s, me + " refused the connection: " + error);
  HandshakeResult r;
  r.fatal = true;
  r.error = std::move(error);
  co_return r;
}

}  // namespace

asio::awaitable<HandshakeResult> run_handshake(Socket& socket, HandshakeParams p) {
  HandshakeResult r;
  const std::string me = "rank " + std::to_string(p.ours.rank);
  const std::string who = "peer rank " + std::to_string(p.expected_rank);

  fill_random(p.ours.nonce);
  const HelloBytes ours = encode_hello(p.ours);
  if (auto ec = co_await write_control(socket, FrameKind::hello, ours)) {
    r.fatal = p.role == Role::initiator;
    r.error = "sending HELLO to " + who + ": " + ec.message();
    co_return r;
  }

  ControlFrame f = co_await read_control(socket);
  if (!f.error.empty()) {
    if (!f.protocol_seen) {
      r.fatal = p.role == Role::initiator;
      r.error = "no ringattn HELLO from the peer: " + f.error;
      co_return r;
    }
    co_return co_await refuse(socket, me, "bad HELLO frame from the peer: " + f.error);
  }
  if (f.header.kind == FrameKind::error) {
    r.error = "the peer refused the connection: " + error_text(f.payload);
    co_return r;
  }
  if (f.header.kind != FrameKind::hello)
    co_return co_await refuse(socket, me, "expected a HELLO frame, got " + std::string(to_string(f.header.kind)));
  Hello theirs;
  if (std::string err = try_decode_hello(f.payload, theirs); !err.empty()) co_return co_await refuse(socket, me, err);
  if (std::string err = compare_hello(p.ours, theirs, p.expected_rank); !err.empty()) co_return co_await refuse(socket, me, err);
  r.peer = theirs;

  const std::span<const std::byte> initiator = p.role == Role::initiator ? std::span<const std::byte>(ours) : f.payload;
  const std::span<const std::byte> acceptor = p.role == Role::initiator ? std::span<const std::byte>(f.payload) : ours;
  const auto secret = std::as_bytes(std::span(p.secret.data(), p.secret.size()));
  const Digest256 mine = auth_proof(secret, p.role, initiator, acceptor);
  if (auto ec = co_await write_control(socket, FrameKind::auth, mine)) {
    r.error = "sending AUTH to peer rank " + std::to_string(theirs.rank) + ": " + ec.message();
    co_return r;
  }
  ControlFrame a = co_await read_control(socket);
  const std::string peer_name = "peer rank " + std::to_string(theirs.rank);
  if (!a.error.empty()) co_return co_await refuse(socket, me, "bad AUTH frame from " + peer_name + ": " + a.error);
  if (a.header.kind == FrameKind::error) {
    r.error = peer_name + " refused the connection: " + error_text(a.payload);
    co_return r;
  }
  if (a.header.kind != FrameKind::auth)
    co_return co_await refuse(socket, me, "expected an AUTH frame from " + peer_name + ", got " + std::string(to_string(a.header.kind)));
  const Role their_role = p.role == Role::initiator ? Role::acceptor : Role::initiator;
  const Digest256 expected = auth_proof(secret, their_role, initiator, acceptor);
  if (!constant_time_equal(a.payload, expected))
    co_return co_await refuse(socket, me, "authentication failed: " + peer_name +
                              "'s proof does not match this rank's shared secret (wrong token?)");
  r.ok = true;
  r.fatal = false;
  co_return r;
}

}  // namespace ringattn::net::tcp
