// Control frames outside a link (the handshake, the rendezvous): one at a time, read
// with the handshake's limits, written whole.
#pragma once

#include <asio/awaitable.hpp>
#include <cstddef>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "net/tcp/stream.hpp"
#include "net/wire.hpp"

namespace ringattn::net::tcp {

asio::awaitable<std::error_code> write_control(Stream& s, FrameKind kind, std::span<const std::byte> payload);

// ERROR(cause, origin, text), then shuts the sending side.
asio::awaitable<void> send_error(Stream& s, FailureCause cause, int origin, const std::string& text);

struct ControlFrame {
  FrameHeader header;
  std::vector<std::byte> payload;  // bounded by the control limits of wire.hpp
  std::string error;               // empty on success
  bool protocol_seen = false;      // the header had our magic
  bool eof = false;
};

asio::awaitable<ControlFrame> read_control(Stream& s);

}  // namespace ringattn::net::tcp
