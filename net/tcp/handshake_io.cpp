// HELLO + AUTH over a stream (protocol in net/handshake.hpp).
#include "net/tcp/handshake_io.hpp"

#include <array>
#include <asio/read.hpp>
#include <asio/ssl/stream.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/write.hpp>
#include <memory>
#include <vector>

#include "net/crc32c.hpp"
#include "net/secret.hpp"
#include "net/tcp/control_io.hpp"
#include "net/tcp/coroutines.hpp"
#include "net/tcp/stream_deadline.hpp"

namespace ringattn::net::tcp {
namespace {

constexpr auto kAwait = asio::use_awaitable;

HandshakeResult ended(HandshakeEnd end, std::string error, FailureCause cause = FailureCause::unknown) {
  HandshakeResult r;
  r.end = end;
  r.error = std::move(error);
  r.cause = cause;
  return r;
}

// The peer answered with ERROR instead of the frame we expected.
HandshakeResult refused_by_peer(const std::string& who, std::span<const std::byte> payload) {
  const ErrorInfo e = decode_error(payload);
  const HandshakeEnd end = e.cause == FailureCause::mismatch ? HandshakeEnd::mismatch
                           : e.cause == FailureCause::auth   ? HandshakeEnd::unauthenticated
                                                             : HandshakeEnd::protocol;
  return ended(end, who + " refused the connection: " + e.text, e.cause);
}

}  // namespace

namespace {

asio::awaitable<HandshakeResult> handshake_steps(Stream& s, HandshakeParams& p) {
  auto finish = [](HandshakeResult r) { return r; };

  const bool initiator = p.role == Role::initiator;
  const std::string me = p.ours.link == LinkKind::rendezvous && p.role == Role::acceptor
                             ? std::string("the rendezvous")
                             : "rank " + std::to_string(p.ours.rank);
  const std::string who = initiator ? p.peer_name : "the connecting peer";
  std::error_code ec;

  if (TlsStream* tls = s.tls()) {
    co_await tls->async_handshake(initiator ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
                                  asio::redirect_error(kAwait, ec));
    if (ec)
      co_return finish(ended(initiator ? HandshakeEnd::unauthenticated : HandshakeEnd::not_a_peer,
                             "TLS handshake with " + who + " failed: " + ec.message() +
                                 " (both sides need --tls and the same token)",
                             FailureCause::auth));
  }

  fill_random(p.ours.nonce);
  HelloBytes ours = encode_hello(p.ours);
  Hello theirs;
  std::vector<std::byte> their_hello;

  // 1. HELLOs: the initiator speaks first; an acceptor says nothing to a connection that
  //    has not shown a well-formed ringattn HELLO.
  auto read_hello = [&]() -> asio::awaitable<HandshakeResult> {
    ControlFrame f = co_await read_control(s);
    if (!f.error.empty()) {
      if (!f.protocol_seen)
        co_return ended(initiator ? HandshakeEnd::io : HandshakeEnd::not_a_peer,
                        "no ringattn HELLO from " + who + ": " + f.error +
                            (s.is_tls() ? "" : " (if the peer runs with TLS, this side needs it too)"));
      co_await send_error(s, FailureCause::protocol, -1, me + " refused the connection: bad HELLO frame: " + f.error);
      co_return ended(HandshakeEnd::protocol, "bad HELLO frame from " + who + ": " + f.error);
    }
    if (f.header.kind == FrameKind::error) co_return refused_by_peer(who, f.payload);
    if (f.header.kind != FrameKind::hello) {
      co_await send_error(s, FailureCause::protocol, -1, me + " refused the connection: expected a HELLO frame");
      co_return ended(HandshakeEnd::protocol, "expected a HELLO frame from " + who + ", got " + std::string(to_string(f.header.kind)));
    }
    if (std::string err = try_decode_hello(f.payload, theirs); !err.empty()) {
      co_await send_error(s, FailureCause::protocol, -1, me + " refused the connection: " + err);
      co_return ended(HandshakeEnd::protocol, "bad HELLO from " + who + ": " + err);
    }
    their_hello = std::move(f.payload);
    co_return ended(HandshakeEnd::ok, "");
  };
  if (initiator) {
    if ((ec = co_await write_control(s, FrameKind::hello, ours)))
      co_return finish(ended(HandshakeEnd::io, "sending HELLO to " + who + ": " + ec.message()));
    if (auto r = co_await read_hello(); !r.ok()) co_return finish(r);
  } else {
    if (auto r = co_await read_hello(); !r.ok()) co_return finish(r);
    // The initiator says what the link is for; the acceptor answers in kind, or refuses.
    if (p.accept) {
      const std::optional<std::uint32_t> expected = p.accept(theirs.link);
      if (!expected) {
        const std::string why = me + " takes no " + std::string(to_string(theirs.link)) + " connections";
        co_await send_error(s, FailureCause::protocol, -1, why);
        co_return finish(ended(HandshakeEnd::protocol, why));
      }
      p.expected_rank = *expected;
      p.ours.link = theirs.link;
      ours = encode_hello(p.ours);
    }
    if ((ec = co_await write_control(s, FrameKind::hello, ours)))
      co_return finish(ended(HandshakeEnd::io, "sending HELLO to " + who + ": " + ec.message()));
  }
  const std::string peer_name = "peer rank " + std::to_string(theirs.rank);

  // 2. AUTH: the initiator proves first; the acceptor answers only after its proof checks
  //    out, so a client without the token never receives a proof to test guesses against.
  const std::span<const std::byte> ini = initiator ? std::span<const std::byte>(ours) : their_hello;
  const std::span<const std::byte> acc = initiator ? std::span<const std::byte>(their_hello) : ours;
  const auto secret = std::as_bytes(std::span(p.secret.data(), p.secret.size()));
  auto send_proof = [&]() -> asio::awaitable<std::error_code> {
    co_return co_await write_control(s, FrameKind::auth, auth_proof(secret, p.role, ini, acc));
  };
  auto check_proof = [&]() -> asio::awaitable<HandshakeResult> {
    ControlFrame a = co_await read_control(s);
    if (!a.error.empty()) co_return ended(HandshakeEnd::io, "no AUTH from " + peer_name + ": " + a.error);
    if (a.header.kind == FrameKind::error) co_return refused_by_peer(peer_name, a.payload);
    const Digest256 want = auth_proof(secret, initiator ? Role::acceptor : Role::initiator, ini, acc);
    if (a.header.kind != FrameKind::auth || !constant_time_equal(a.payload, want)) {
      const std::string why = "authentication failed: " + peer_name + "'s proof does not match the shared secret of " + me +
                              " (different tokens?)";
      co_await send_error(s, FailureCause::auth, -1, me + " refused the connection: " + why);
      co_return ended(HandshakeEnd::unauthenticated, why, FailureCause::auth);
    }
    co_return ended(HandshakeEnd::ok, "");
  };
  if (initiator) {
    if ((ec = co_await send_proof())) co_return finish(ended(HandshakeEnd::io, "sending AUTH to " + peer_name + ": " + ec.message()));
    if (auto r = co_await check_proof(); !r.ok()) co_return finish(r);
  } else {
    if (auto r = co_await check_proof(); !r.ok()) co_return finish(r);
    if ((ec = co_await send_proof())) co_return finish(ended(HandshakeEnd::io, "sending AUTH to " + peer_name + ": " + ec.message()));
  }

  // 3. Both sides are authenticated: now a disagreement is a configuration error of the
  //    ring, reported on both sides at once.
  if (std::string err = compare_hello(p.ours, theirs, p.expected_rank); !err.empty()) {
    co_await send_error(s, FailureCause::mismatch, -1, me + " refused the connection: " + err);
    HandshakeResult r = ended(HandshakeEnd::mismatch, err, FailureCause::mismatch);
    r.peer = theirs;
    co_return finish(r);
  }
  HandshakeResult r = ended(HandshakeEnd::ok, "");
  r.peer = theirs;
  co_return finish(r);
}

}  // namespace

asio::awaitable<HandshakeResult> run_handshake(Stream& s, HandshakeParams p) {
  // The deadline closes the stream, which ends whatever read or write is pending.
  StreamDeadline deadline(s, p.deadline);
  HandshakeResult r = co_await handshake_steps(s, p);
  if (!r.ok() && p.abort && *p.abort && !deadline.fired() && s.is_open()) {
    // This rank gave up meanwhile: tell the peer the real cause, not just a closed socket.
    const ErrorInfo& e = **p.abort;
    co_await send_error(s, e.cause, e.origin, e.text);
    r = ended(HandshakeEnd::io, "this rank gave up: " + e.text);
  }
  deadline.disarm();
  if (deadline.fired() && !r.ok())
    r = ended(HandshakeEnd::timeout,
              "the handshake did not complete within " + std::to_string(p.deadline.count()) + " ms (" + r.error + ")");
  co_return r;
}

}  // namespace ringattn::net::tcp
