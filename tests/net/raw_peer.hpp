// A hand-driven peer for fault tests: plain POSIX sockets that speak the wire format
// byte by byte, so a test can send what no correct transport would (a bad version, a
// corrupted payload, an absurd length, half a frame then death) without test hooks in
// the transport itself. Every receive has a deadline (SO_RCVTIMEO).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "net/crc32c.hpp"
#include "net/handshake.hpp"
#include "net/secret.hpp"
#include "net/transport.hpp"
#include "net/wire.hpp"
#include "tests/free_port.hpp"

namespace ringattn::net::test {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset();
    fd_ = std::exchange(o.fd_, -1);
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

inline void set_timeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>((t.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

class RawListener {
 public:
  RawListener() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_.get(), 8) != 0)
      throw std::runtime_error("raw listener: bind/listen failed");
    socklen_t len = sizeof a;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  std::uint16_t port() const { return port_; }

  Fd accept(std::chrono::milliseconds timeout) {
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) throw std::runtime_error("raw listener: accept timed out");
    Fd c(::accept(fd_.get(), nullptr, nullptr));
    set_timeouts(c.get(), std::chrono::milliseconds(5000));
    return c;
  }

 private:
  Fd fd_;
  std::uint16_t port_ = 0;
};

inline Fd raw_dial(std::uint16_t port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("raw dial failed");
  set_timeouts(fd.get(), std::chrono::milliseconds(5000));
  return fd;
}

// A port nobody listens on (bound once, then released).
// A port nobody listens on for the life of this test: claimed through free_port(), so no other
// test process listens there either. (Binding port 0 and releasing it handed out an ephemeral
// port, which another suite's transport listening on port 0 took under load: the "peer that
// never connects" then answered as some other test's rank 3. CI, under load, run 3.)
inline std::uint16_t unused_port() { return static_cast<std::uint16_t>(ringattn::test::free_port()); }

inline void send_all(int fd, std::span<const std::byte> b) {
  while (!b.empty()) {
    const ssize_t n = ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("raw send failed");
    b = b.subspan(static_cast<std::size_t>(n));
  }
}

inline bool recv_all(int fd, std::span<std::byte> b) {
  while (!b.empty()) {
    const ssize_t n = ::recv(fd, b.data(), b.size(), 0);
    if (n <= 0) return false;
    b = b.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

inline void send_frame(int fd, FrameHeader h, std::span<const std::byte> payload) {
  h.payload_bytes = payload.size();
  h.payload_crc = crc32c(payload);
  send_all(fd, encode_header(h));
  send_all(fd, payload);
}

struct RawFrame {
  FrameHeader header;
  std::vector<std::byte> payload;
  std::string text() const { return std::string(reinterpret_cast<const char*>(payload.data()), payload.size()); }
};

// Reads one control frame (handshake limits), nullopt on EOF/timeout/garbage.
inline std::optional<RawFrame> recv_control(int fd) {
  HeaderBytes hb{};
  if (!recv_all(fd, hb)) return std::nullopt;
  RawFrame f;
  if (!try_decode_header(hb, FrameLimits::handshake_only(), f.header).empty()) return std::nullopt;
  f.payload.resize(static_cast<std::size_t>(f.header.payload_bytes));
  if (!recv_all(fd, f.payload)) return std::nullopt;
  return f;
}

inline void send_control(int fd, FrameKind kind, std::span<const std::byte> payload) {
  FrameHeader h;
  h.kind = kind;
  send_frame(fd, h, payload);
}

// The handshake of net/handshake.hpp done by hand, in protocol order: the initiator sends
// HELLO first and proves first; the acceptor answers a HELLO with its own and proves
// only after checking the initiator's proof. Returns "" on success or what failed.
inline std::string raw_handshake(int fd, Role role, Hello ours, std::uint32_t expected_rank, const std::string& secret) {
  fill_random(ours.nonce);
  const HelloBytes mine = encode_hello(ours);
  std::optional<RawFrame> theirs;
  if (role == Role::initiator) {
    send_control(fd, FrameKind::hello, mine);
    theirs = recv_control(fd);
  } else {
    theirs = recv_control(fd);
    send_control(fd, FrameKind::hello, mine);
  }
  if (!theirs || theirs->header.kind != FrameKind::hello) return "no HELLO";
  Hello peer;
  if (auto err = try_decode_hello(theirs->payload, peer); !err.empty()) return err;
  const auto key = std::as_bytes(std::span(secret.data(), secret.size()));
  const std::span<const std::byte> ini = role == Role::initiator ? std::span<const std::byte>(mine) : theirs->payload;
  const std::span<const std::byte> acc = role == Role::initiator ? std::span<const std::byte>(theirs->payload) : mine;
  const Digest256 want = auth_proof(key, role == Role::initiator ? Role::acceptor : Role::initiator, ini, acc);
  auto check = [&](const std::optional<RawFrame>& auth) -> std::string {
    if (!auth) return "no AUTH";
    if (auth->header.kind != FrameKind::auth) return "got " + std::string(to_string(auth->header.kind)) + ": " + auth->text();
    return constant_time_equal(auth->payload, want) ? "" : "bad AUTH";
  };
  if (role == Role::initiator) {
    send_control(fd, FrameKind::auth, auth_proof(key, role, ini, acc));
    if (auto err = check(recv_control(fd)); !err.empty()) return err;
  } else {
    if (auto err = check(recv_control(fd)); !err.empty()) return err;
    send_control(fd, FrameKind::auth, auth_proof(key, role, ini, acc));
  }
  return compare_hello(ours, peer, expected_rank);
}

// Rank 1 of a two-rank ring whose rank 0 is a real transport: accepts rank 0's
// connection and dials rank 0, handshaking both. `in` carries rank 0's frames to us,
// `out` carries our frames to rank 0.
struct RawRank1 {
  Fd in, out;
};

inline Hello raw_hello(const TransportConfig& c, std::uint32_t rank) {
  Hello h;
  h.ring_id = c.ring_id;
  h.rank = rank;
  h.world = static_cast<std::uint32_t>(c.world);
  h.limits = c.limits;
  return h;
}

}  // namespace ringattn::net::test
