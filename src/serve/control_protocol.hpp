// ringattn serve — the control protocol between a client (submit, status) and a daemon:
// JSON and TENSOR messages on the public authenticated channel (ringattn/channel.hpp:
// framing, deadlines, token, TLS).
//
// Conversation (client -> daemon, daemon -> client):
//   {"op":"submit", shape, mask, layout, dtype, lse}
//        {"event":"redirect","to":rank 0} (a daemon that is not rank 0), or {"event":"error"}
//        (limits, memory, draining), or {"event":"queued"}, then "alive" every second while
//        it waits; {"event":"upload","world":P} once the ring is free for it:
//   per rank 1..P-1, then 0 (layout order): TENSOR K rows, TENSOR V rows, TENSOR Q rows
//        (rank 0 forwards the workers' shards once the whole upload is in, so that how
//        fast a client sends never counts against the ring's timeout) {"event":"started"} {"event":"step"}... {"event":
//        "node_done"} per rank, then {"event":"done"} and per rank 0..P-1 TENSOR rows x
//        (heads*head_dim + heads): O then lse of each row; or {"event":"error"} naming
//        the rank and the cause
//   {"op":"status"}   {"event":"status", ...this node...}
//   {"op":"nodes"}    {"event":"nodes", [{rank, control, ...} per node]}
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "ringattn/channel.hpp"

namespace ringattn::serve {

using Millis = std::chrono::milliseconds;

// A client's token: --token-file, else RINGATTN_TOKEN_FILE, else RINGATTN_TOKEN (the
// same as the daemons').
std::string client_secret(const std::optional<std::string>& token_file);

// The client's side: Channel::connect with the token, the TLS choice and `timeout` as the
// channel's silence deadline. (Not a coroutine itself: it returns connect's awaitable.)
inline asio::awaitable<Channel> connect_control(std::string address, std::string secret, bool tls, Millis timeout) {
  return Channel::connect(std::move(address), ChannelOptions{std::move(secret), tls, timeout});
}

}  // namespace ringattn::serve
