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

// One handshake, its three steps each a coroutine: HELLOs, AUTH, agreement. Every step
// returns ok or how the handshake ended; run() stops at the first that is not ok.
class Handshake {
 public:
  Handshake(Stream& s, HandshakeParams& p)
      : s_(s),
        p_(p),
        initiator_(p.role == Role::initiator),
        me_(p.ours.link == LinkKind::rendezvous && p.role == Role::acceptor ? std::string("the rendezvous")
                                                                              : "rank " + std::to_string(p.ours.rank)),
        who_(initiator_ ? p.peer_name : "the connecting peer") {}

  asio::awaitable<HandshakeResult> run() {
    if (auto r = co_await tls(); !r.ok()) co_return r;
    fill_random(p_.ours.nonce);
    ours_ = encode_hello(p_.ours);
    if (auto r = co_await hellos(); !r.ok()) co_return r;
    peer_name_ = "peer rank " + std::to_string(theirs_.rank);
    if (auto r = co_await auth(); !r.ok()) co_return r;
    co_return co_await agree();
  }

 private:
  asio::awaitable<HandshakeResult> tls() {
    TlsStream* tls = s_.tls();
    if (!tls) co_return ended(HandshakeEnd::ok, "");
    std::error_code ec;
    co_await tls->async_handshake(initiator_ ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
                                  asio::redirect_error(kAwait, ec));
    if (ec)
      co_return ended(initiator_ ? HandshakeEnd::unauthenticated : HandshakeEnd::not_a_peer,
                      "TLS handshake with " + who_ + " failed: " + ec.message() +
                          " (both sides need --tls and the same token)",
                      FailureCause::auth);
    co_return ended(HandshakeEnd::ok, "");
  }

  // 1. HELLOs: the initiator speaks first; an acceptor says nothing to a connection that
  //    has not shown a well-formed ringattn HELLO, then answers in the initiator's kind of
  //    link (or refuses that kind).
  asio::awaitable<HandshakeResult> hellos() {
    if (initiator_) {
      if (auto r = co_await send_hello(); !r.ok()) co_return r;
      co_return co_await read_hello();
    }
    if (auto r = co_await read_hello(); !r.ok()) co_return r;
    if (p_.accept) {
      const std::optional<std::uint32_t> expected = p_.accept(theirs_.link);
      if (!expected) {
        const std::string why = me_ + " takes no " + std::string(to_string(theirs_.link)) + " connections";
        co_await send_error(s_, FailureCause::protocol, -1, why);
        co_return ended(HandshakeEnd::protocol, why);
      }
      p_.expected_rank = *expected;
      p_.ours.link = theirs_.link;
      ours_ = encode_hello(p_.ours);
    }
    co_return co_await send_hello();
  }

  asio::awaitable<HandshakeResult> send_hello() {
    if (std::error_code ec = co_await write_control(s_, FrameKind::hello, ours_))
      co_return ended(HandshakeEnd::io, "sending HELLO to " + who_ + ": " + ec.message());
    co_return ended(HandshakeEnd::ok, "");
  }

  asio::awaitable<HandshakeResult> read_hello() {
    ControlFrame f = co_await read_control(s_);
    if (!f.error.empty()) {
      if (!f.protocol_seen)
        co_return ended(initiator_ ? HandshakeEnd::io : HandshakeEnd::not_a_peer,
                        "no ringattn HELLO from " + who_ + ": " + f.error +
                            (s_.is_tls() ? "" : " (if the peer runs with TLS, this side needs it too)"));
      co_await send_error(s_, FailureCause::protocol, -1, me_ + " refused the connection: bad HELLO frame: " + f.error);
      co_return ended(HandshakeEnd::protocol, "bad HELLO frame from " + who_ + ": " + f.error);
    }
    if (f.header.kind == FrameKind::error) co_return refused_by_peer(who_, f.payload);
    if (f.header.kind != FrameKind::hello) {
      co_await send_error(s_, FailureCause::protocol, -1, me_ + " refused the connection: expected a HELLO frame");
      co_return ended(HandshakeEnd::protocol,
                      "expected a HELLO frame from " + who_ + ", got " + std::string(to_string(f.header.kind)));
    }
    if (std::string err = try_decode_hello(f.payload, theirs_); !err.empty()) {
      co_await send_error(s_, FailureCause::protocol, -1, me_ + " refused the connection: " + err);
      co_return ended(HandshakeEnd::protocol, "bad HELLO from " + who_ + ": " + err);
    }
    their_hello_ = std::move(f.payload);
    co_return ended(HandshakeEnd::ok, "");
  }

  // 2. AUTH: the initiator proves first; the acceptor answers only after its proof checks
  //    out, so a client without the token never receives a proof to test guesses against.
  asio::awaitable<HandshakeResult> auth() {
    if (initiator_) {
      if (auto r = co_await send_proof(); !r.ok()) co_return r;
      co_return co_await check_proof();
    }
    if (auto r = co_await check_proof(); !r.ok()) co_return r;
    co_return co_await send_proof();
  }

  // The proofs cover both HELLOs, the initiator's first.
  std::span<const std::byte> initiator_hello() const { return initiator_ ? std::span<const std::byte>(ours_) : their_hello_; }
  std::span<const std::byte> acceptor_hello() const { return initiator_ ? std::span<const std::byte>(their_hello_) : ours_; }
  std::span<const std::byte> secret() const { return std::as_bytes(std::span(p_.secret.data(), p_.secret.size())); }

  asio::awaitable<HandshakeResult> send_proof() {
    const Digest256 proof = auth_proof(secret(), p_.role, initiator_hello(), acceptor_hello());
    if (std::error_code ec = co_await write_control(s_, FrameKind::auth, proof))
      co_return ended(HandshakeEnd::io, "sending AUTH to " + peer_name_ + ": " + ec.message());
    co_return ended(HandshakeEnd::ok, "");
  }

  asio::awaitable<HandshakeResult> check_proof() {
    ControlFrame a = co_await read_control(s_);
    if (!a.error.empty()) co_return ended(HandshakeEnd::io, "no AUTH from " + peer_name_ + ": " + a.error);
    if (a.header.kind == FrameKind::error) co_return refused_by_peer(peer_name_, a.payload);
    const Digest256 want =
        auth_proof(secret(), initiator_ ? Role::acceptor : Role::initiator, initiator_hello(), acceptor_hello());
    if (a.header.kind != FrameKind::auth || !constant_time_equal(a.payload, want)) {
      const std::string why = "authentication failed: " + peer_name_ +
                              "'s proof does not match the shared secret of " + me_ + " (different tokens?)";
      co_await send_error(s_, FailureCause::auth, -1, me_ + " refused the connection: " + why);
      co_return ended(HandshakeEnd::unauthenticated, why, FailureCause::auth);
    }
    co_return ended(HandshakeEnd::ok, "");
  }

  // 3. Both sides are authenticated: now a disagreement is a configuration error of the
  //    ring, reported on both sides at once.
  asio::awaitable<HandshakeResult> agree() {
    HandshakeResult r = ended(HandshakeEnd::ok, "");
    if (std::string err = compare_hello(p_.ours, theirs_, p_.expected_rank); !err.empty()) {
      co_await send_error(s_, FailureCause::mismatch, -1, me_ + " refused the connection: " + err);
      r = ended(HandshakeEnd::mismatch, err, FailureCause::mismatch);
    }
    r.peer = theirs_;
    co_return r;
  }

  Stream& s_;
  HandshakeParams& p_;
  const bool initiator_;
  const std::string me_, who_;
  std::string peer_name_;
  HelloBytes ours_{};
  Hello theirs_;
  std::vector<std::byte> their_hello_;
};

}  // namespace

asio::awaitable<HandshakeResult> run_handshake(Stream& s, HandshakeParams p) {
  // The deadline closes the stream, which ends whatever read or write is pending.
  StreamDeadline deadline(s, p.deadline);
  Handshake handshake(s, p);
  HandshakeResult r = co_await handshake.run();
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
