// Socket settings of every ring connection, and the one alias set used across tcp/.
#pragma once

#include <asio/ip/tcp.hpp>
#include <chrono>
#include <string>

namespace ringattn::net::tcp {

using Socket = asio::ip::tcp::socket;
using Acceptor = asio::ip::tcp::acceptor;

// Large kernel buffers let one write hand the kernel a whole MiB-sized chunk and keep the
// window open across a loopback or LAN round trip (Linux caps them at net.core.[rw]mem_max
// and doubles what it grants). Set before connect()/listen() so the window scale that TCP
// negotiates in the SYN can use them.
inline constexpr int kSocketBufferBytes = 4 << 20;

// Bytes per write system call: >= 512 KiB reaches 4+ GB/s on loopback where 128 KiB
// stays near 2.5 GB/s (fewer, larger copies into the kernel).
inline constexpr std::size_t kIoChunkBytes = 2 << 20;
// Bytes per read system call: the receiver CRCs each chunk right after the kernel copied
// it, so a chunk is sized to be still in L2 (1 MiB here) when the CRC reads it.
inline constexpr std::size_t kReadChunkBytes = 256 << 10;

// Buffer sizes (before connect). Errors are ignored: a kernel that refuses only costs speed.
inline void set_buffer_sizes(Socket& s) {
  std::error_code ignored;
  s.set_option(asio::socket_base::send_buffer_size(kSocketBufferBytes), ignored);
  s.set_option(asio::socket_base::receive_buffer_size(kSocketBufferBytes), ignored);
}

inline void set_buffer_sizes(Acceptor& a) {  // inherited by accepted sockets
  std::error_code ignored;
  a.set_option(asio::socket_base::send_buffer_size(kSocketBufferBytes), ignored);
  a.set_option(asio::socket_base::receive_buffer_size(kSocketBufferBytes), ignored);
}

// A peer may not be listening yet: dials retry, backing off from the first pause to the
// longest.
inline constexpr std::chrono::milliseconds kFirstBackoff{10}, kMaxBackoff{500};

// open, reuse_address, (large buffers,) bind, listen: the first error in `ec`.
inline void open_acceptor(Acceptor& a, const asio::ip::tcp::endpoint& ep, bool large_buffers, std::error_code& ec) {
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec && large_buffers) set_buffer_sizes(a);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
}

// "a:p" of either end of a socket, "?" if it has none (closed, not connected).
inline std::string endpoint_text(const Socket& s, bool remote) {
  std::error_code ec;
  const auto ep = remote ? s.remote_endpoint(ec) : s.local_endpoint(ec);
  return ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
}

// Frames are written whole; Nagle would only delay the last segment of each frame.
inline void set_no_delay(Socket& s) {
  std::error_code ignored;
  s.set_option(asio::ip::tcp::no_delay(true), ignored);
}

}  // namespace ringattn::net::tcp
