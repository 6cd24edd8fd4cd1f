// The handshake of net/handshake.hpp, run over a connected stream under a deadline.
#pragma once

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "net/handshake.hpp"
#include "net/tcp/stream.hpp"

namespace ringattn::net::tcp {

struct HandshakeParams {
  Hello ours;                   // nonce is filled in fresh per connection
  Role role = Role::initiator;
  std::uint32_t expected_rank = 0;  // or kAnyRank
  std::string secret;
  std::string peer_name;            // for messages: "successor rank 1 at host:port"
  // Acceptor: the rank it expects on a link of the initiator's kind (kAnyRank: any
  // other rank), or nullopt to refuse that kind. Unset: expected_rank and ours.link.
  std::function<std::optional<std::uint32_t>(LinkKind)> accept;
  std::chrono::milliseconds deadline{5000};  // the whole handshake, TLS included
  // Set by the transport when it gives up while this handshake runs (then it cancels the
  // stream): the peer is told this cause instead of seeing the connection just close.
  std::shared_ptr<std::optional<ErrorInfo>> abort;
};

// How a handshake ended. An acceptor drops the connections that never proved the shared
// secret (not_a_peer, unauthenticated, timeout) and keeps serving others: nobody without
// the token can fail the ring. What an authenticated peer refuses (mismatch) is fatal.
enum class HandshakeEnd : std::uint8_t {
  ok,
  not_a_peer,       // no ringattn HELLO: closed at once, wrong magic, TLS expected but absent
  timeout,          // did not finish within the deadline
  unauthenticated,  // a proof did not verify, or the peer refused ours
  mismatch,         // authenticated, but the HELLOs disagree (ring, rank, world, job)
  protocol,         // a malformed frame from an authenticated peer
  io,               // the connection broke
};

struct HandshakeResult {
  HandshakeEnd end = HandshakeEnd::io;
  std::string error;  // names the peer, the field or the cause
  Hello peer;
  FailureCause cause = FailureCause::unknown;  // when the peer refused us: what it said
  bool ok() const { return end == HandshakeEnd::ok; }
};

// TLS handshake if the stream has TLS, then HELLO and AUTH in the order of
// handshake.hpp. Before giving up on an answering peer it tells it why with an ERROR
// frame. Never takes longer than params.deadline (it closes the stream when that passes).
asio::awaitable<HandshakeResult> run_handshake(Stream& stream, HandshakeParams params);

}  // namespace ringattn::net::tcp
