// Socket settings of every ring connection, and the one alias set used across tcp/.
#pragma once

#include <asio/ip/tcp.hpp>

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

// Frames are written whole; Nagle would only delay the last segment of each frame.
inline void set_no_delay(Socket& s) {
  std::error_code ignored;
  s.set_option(asio::ip::tcp::no_delay(true), ignored);
}

}  // namespace ringattn::net::tcp
