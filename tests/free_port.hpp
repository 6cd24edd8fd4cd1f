// A TCP port on 127.0.0.1 for a test's daemons and rendezvous, which no other test and no
// outgoing connection will take while this process lives.
//
// Binding port 0 and releasing it (what this did before) hands out a port from the kernel's
// ephemeral range, the same range every outgoing connect() draws from: under load (two test
// suites at a time, hundreds of connections a second) a daemon told to listen there found it
// taken ("Address already in use", CI under load, 1 run in ~20). So ports come from below the
// ephemeral range (ip_local_port_range), and each is claimed for the life of the test process
// by an OFD lock on byte `port` of one shared file: another test process (C++ here, Python's
// tests/python/ports.py) skips a locked port, and the lock goes away when the process exits,
// however it exits. The bind check still skips ports some other program holds.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

namespace ringattn::test {

namespace port_detail {

constexpr const char* kClaimFile = "/tmp/ringattn-test-ports.lock";

// [lo, hi): below the kernel's ephemeral range, above the well-known ports.
inline std::pair<int, int> claimable_range() {
  int eph_lo = 32768, eph_hi = 60999;
  if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &eph_lo, &eph_hi) != 2) eph_lo = 32768;
    std::fclose(f);
  }
  if (eph_lo > 12000) return {10000, eph_lo};
  return {eph_hi + 1, 65536};  // an unusual range set low: use the ports above it
}

inline bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace port_detail

inline int free_port() {
  static std::mutex mu;
  static std::set<int> mine;  // an OFD lock does not conflict with itself: this process's claims
  static int fd = -1;
  static unsigned next = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (fd < 0) {
    fd = ::open(port_detail::kClaimFile, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) throw std::runtime_error(std::string("free_port: cannot open ") + port_detail::kClaimFile);
    next = static_cast<unsigned>(::getpid()) * 2654435761u;  // processes start far apart
  }
  const auto [lo, hi] = port_detail::claimable_range();
  const unsigned span = static_cast<unsigned>(hi - lo);
  for (unsigned tried = 0; tried < span; ++tried) {
    const int port = lo + static_cast<int>(next++ % span);
    if (mine.count(port)) continue;
    struct flock fl{};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = port;
    fl.l_len = 1;
    if (::fcntl(fd, F_OFD_SETLK, &fl) != 0) continue;  // another live test process has it
    if (!port_detail::bindable(port)) {
      fl.l_type = F_UNLCK;
      ::fcntl(fd, F_OFD_SETLK, &fl);
      continue;
    }
    mine.insert(port);
    return port;
  }
  throw std::runtime_error("free_port: no claimable loopback port left in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + ")");
}

}  // namespace ringattn::test
