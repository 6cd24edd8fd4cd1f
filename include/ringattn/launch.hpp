// ringattn — what a launcher needs beside Ring: the ring's shared token, a fresh ring id,
// host:port addresses, and the rendezvous through which ranks that know one address (a
// master, as torchrun's MASTER_ADDR:MASTER_PORT) learn each other's. `ringattn run`, the
// daemons and the benchmarks launch their ranks with exactly this; so can any job.
//
// A token authenticates every connection of a ring (HMAC proofs in the HELLO, and the TLS
// 1.3 key under RingOptions::tls); it never goes on the wire, and its fingerprint (an HMAC
// keyed by it) is what a launcher compares to name the rank that holds another one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ringattn/ring.hpp"

namespace ringattn {

inline constexpr const char* kTokenEnv = "RINGATTN_TOKEN";

// The token from `token_file` if it is non-empty, else from RINGATTN_TOKEN; trailing
// whitespace is stripped. Throws InvalidArgument, naming the source and the fix, if
// neither yields one, if it is shorter than 16 bytes, or if the file is not a regular
// file, is readable by group or others (chmod 600), or is larger than 4 KiB.
std::string load_token(const std::string& token_file = "");
// A token handed over by other means (a launcher's pipe): at least 16 bytes, else
// InvalidArgument naming `source`.
std::string checked_token(std::string token, const std::string& source);
// RINGATTN_TOKEN if it is set (checked), else a fresh random token: for a launcher that
// starts every rank itself and hands them the token.
std::string launcher_token();
std::string generate_token();                             // 32 random bytes as 64 hex digits
std::string token_fingerprint(const std::string& token);  // 16 hex digits, public
std::uint64_t new_ring_id();                              // 63 random bits (positive)

// "host:port", "[v6]:port" or a name; port 0 means any free one where a port is bound.
struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string text() const;
};
// Throws InvalidArgument naming `what` (e.g. "--control") for a malformed address.
HostPort parse_host_port(const std::string& text, const std::string& what);
// The address of this machine's interface that traffic to `peer` ("host:port") leaves
// through (nothing is sent). Throws NetworkError if there is no route.
std::string local_address_towards(const std::string& peer);

// Serves one rendezvous in a thread of its own, for the ring `ranks` describes: its
// world_size, ring_id, limits, job digest and token (token or token_file) — a rank whose
// options differ is refused, as on the ring's own links. Ranks reach it with
// RingOptions::master = "host:port()" and master_is_external = true.
class RendezvousServer {
 public:
  // Binds `listen` ("host:port"; port 0: any free one); waits at most `timeout_seconds`
  // for every rank. Throws InvalidArgument for bad options, NetworkError if it cannot bind.
  RendezvousServer(const std::string& listen, const RingOptions& ranks, double timeout_seconds);
  ~RendezvousServer();  // stops it (ranks still waiting get an ERROR)
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  std::uint16_t port() const;
  // Blocks until the rendezvous ended: "" if every rank got the list, else why not.
  std::string wait();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringattn
