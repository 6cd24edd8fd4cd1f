// ringattn serve — the control protocol between a client (submit, status) and a daemon.
//
// A TCP connection to the daemon's control port, TLS 1.3 under --tls, authenticated
// exactly like the ring's links (net/handshake.hpp, link kind "control": the client
// proves the token first). Then messages, each a 16-byte header and a payload:
//
//   offset size field
//      0    4  magic    "RACT"
//      4    1  type     1 JSON (UTF-8 object, at most kMaxJsonBytes), 2 TENSOR (raw bytes)
//      5    3  reserved 0
//      8    8  length   payload bytes
//
// A JSON payload is bounded before it is read; a TENSOR is read only into a buffer the
// reader sized from a request it already validated, and its length must match exactly.
// Every read and write has a deadline that measures silence: a peer that sends nothing
// for `idle` fails the connection (long tensors move in chunks, each under the deadline).
//
// Conversation (client -> daemon, daemon -> client):
//   {"op":"submit", shape, mask, layout, dtype, lse}
//        {"event":"redirect","to":rank 0} (a daemon that is not rank 0), or {"event":"error"}
//        (limits, memory, draining), or {"event":"queued"}, then "alive" every second while
//        it waits; {"event":"upload","world":P} once the ring is free for it:
//   per rank 1..P-1, then 0 (layout order): TENSOR K rows, TENSOR V rows, TENSOR Q rows
//        (rank 0 forwards each worker's shard as it arrives: the workers start while rank
//        0's own rows still come) {"event":"started"} {"event":"step"}... {"event":
//        "node_done"} per rank, then {"event":"done"} and per rank 0..P-1 TENSOR rows x
//        (heads*head_dim + heads): O then lse of each row; or {"event":"error"} naming
//        the rank and the cause
//   {"op":"status"}   {"event":"status", ...this node...}
//   {"op":"nodes"}    {"event":"nodes", [{rank, control, ...} per node]}
#pragma once

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/tcp/stream.hpp"

namespace ringattn::serve {

inline constexpr std::size_t kMaxJsonBytes = 1 << 20;

enum class MessageType : std::uint8_t { json = 1, tensor = 2 };

struct MessageHead {
  MessageType type = MessageType::json;
  std::uint64_t length = 0;
};

using Millis = std::chrono::milliseconds;

// Throw NetworkError naming `peer` on a broken connection, a deadline, a bad header, an
// oversized JSON or a tensor of the wrong length.
asio::awaitable<void> write_json(net::tcp::Stream& s, const std::string& json, Millis idle, const std::string& peer);
// One TENSOR made of `parts` laid end to end (e.g. a shard's row runs, straight from the
// whole tensor: no gathering copy).
asio::awaitable<void> write_tensor_parts(net::tcp::Stream& s, std::vector<std::span<const std::byte>> parts, Millis idle,
                                         const std::string& peer, const std::function<void(std::uint64_t done)>& progress = {});
asio::awaitable<void> write_tensor(net::tcp::Stream& s, std::span<const std::byte> bytes, Millis idle,
                                   const std::string& peer, const std::function<void(std::uint64_t done)>& progress = {});
asio::awaitable<MessageHead> read_head(net::tcp::Stream& s, Millis idle, const std::string& peer);
// A JSON message's payload, after read_head said it is one (length bounded first).
asio::awaitable<std::string> read_json_body(net::tcp::Stream& s, const MessageHead& h, Millis idle,
                                            const std::string& peer);
asio::awaitable<std::string> read_json(net::tcp::Stream& s, Millis idle, const std::string& peer);
// A TENSOR of exactly into.size() bytes.
asio::awaitable<void> read_tensor(net::tcp::Stream& s, std::span<std::byte> into, Millis idle, const std::string& peer,
                                  const std::function<void(std::uint64_t done)>& progress = {});
asio::awaitable<void> read_tensor_body(net::tcp::Stream& s, const MessageHead& h, std::span<std::byte> into, Millis idle,
                                       const std::string& peer, const std::function<void(std::uint64_t)>& progress = {});

// A client's token: --token-file, else RINGATTN_TOKEN_FILE, else RINGATTN_TOKEN (the
// same as the daemons').
std::string client_secret(const std::optional<std::string>& token_file);

// The client's side: connects to `address` ("host:port"), TLS if asked, and proves the
// token. Throws NetworkError naming the address and what to do.
struct ClientConnection {
  std::unique_ptr<net::tcp::Stream> stream;
  std::shared_ptr<void> tls_context;  // keeps the TLS context alive with the stream
  std::string peer;                   // "daemon at host:port"
};
asio::awaitable<ClientConnection> connect_control(std::string address, std::string secret, bool tls, Millis timeout);

}  // namespace ringattn::serve
