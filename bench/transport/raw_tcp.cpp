// Plain blocking TCP between two threads (see raw_tcp.hpp).
#include "raw_tcp.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "ringattn/link_probe.hpp"

namespace ringattn::bench {
namespace {

using Clock = std::chrono::steady_clock;

void tune(int fd) {
  const int one = 1, buf = LinkSocketSettings::buffer_bytes;  // the ring links' buffers
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

// A connected pair of TCP sockets on `host` (sender, receiver).
std::pair<int, int> connected_pair(const std::string& host) {
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  tune(l);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 || ::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(l, 1) != 0 || ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(l);
    throw std::runtime_error("raw tcp baseline: cannot listen on " + host);
  }
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  tune(s);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("raw tcp baseline: connect");
  const int r = ::accept(l, nullptr, nullptr);
  ::close(l);
  return {s, r};
}

}  // namespace

std::vector<double> raw_tcp_gbps(const std::string& host, std::uint64_t block_bytes, int depth, int reps, double seconds) {
  auto [s, r] = connected_pair(host);
  std::vector<std::byte> payload(block_bytes, std::byte{1});
  std::thread sender([fd = s, &payload] {
    for (;;) {  // whole blocks in kIoChunkBytes writes, until the receiver hangs up
      for (std::size_t off = 0; off < payload.size();) {
        const ssize_t n = ::send(fd, payload.data() + off, std::min(payload.size() - off, LinkSocketSettings::write_chunk_bytes), MSG_NOSIGNAL);
        if (n <= 0) return;
        off += static_cast<std::size_t>(n);
      }
    }
  });
  std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(depth), std::vector<std::byte>(block_bytes));
  std::vector<double> gbps;
  std::size_t next = 0;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration<double>(rep == 0 ? std::min(0.3, seconds) : seconds);
    std::uint64_t bytes = 0;
    while (Clock::now() < end) {
      std::byte* dst = bufs[next].data();
      for (std::size_t off = 0; off < block_bytes;) {
        const ssize_t n = ::recv(r, dst + off, std::min<std::size_t>(block_bytes - off, LinkSocketSettings::read_chunk_bytes), 0);
        if (n <= 0) throw std::runtime_error("raw tcp baseline: receive failed");
        off += static_cast<std::size_t>(n);
      }
      bytes += block_bytes;
      next = (next + 1) % bufs.size();
    }
    if (rep > 0) gbps.push_back(static_cast<double>(bytes) / 1e9 / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  ::shutdown(r, SHUT_RDWR);
  sender.join();
  ::close(s);
  ::close(r);
  return gbps;
}

}  // namespace ringattn::bench
