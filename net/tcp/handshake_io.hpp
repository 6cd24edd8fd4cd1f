// The handshake of net/handshake.hpp, run over a connected socket.
#pragma once

#include <asio/awaitable.hpp>
#include <cstdint>
#include <string>

#include "net/handshake.hpp"
#include "net/tcp/socket_options.hpp"

namespace ringattn::net::tcp {

struct HandshakeParams {
  Hello ours;                   // nonce is filled in fresh per connection
  Role role = Role::initiator;
  std::uint32_t expected_rank = 0;
  std::string secret;
};

struct HandshakeResult {
  bool ok = false;
  // false: the peer never showed that it speaks this protocol (closed at once, wrong
  // magic) — an acceptor logs and ignores those (port scanners, health checks).
  bool fatal = true;
  std::string error;  // names the peer, the field or the cause
  Hello peer;
};

// HELLO then AUTH, mutual. Before returning a fatal failure it tells the peer why with an
// ERROR frame. No deadline of its own: the caller closes the socket when its deadline
// passes, which ends any read or write here with an error.
asio::awaitable<HandshakeResult> run_handshake(Socket& socket, HandshakeParams params);

}  // namespace ringattn::net::tcp
