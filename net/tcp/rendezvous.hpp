// The rendezvous: how the ranks of a ring learn each other's addresses when all they
// know is one address (a master, as torchrun's MASTER_ADDR:MASTER_PORT) and the token.
//
//   server (rank 0, or a launcher)           every rank r
//   listens on the master address            listens on the interface it reaches the
//                                            master through, any free port
//   <-- connect, HELLO + AUTH (rendezvous link: the server speaks as rank 0)
//   <-- ADDRESS "host:port"                  (each rank exactly once)
//   ... once all `world` ranks registered:
//   --> PEERS "h0:p0,h1:p1,..."              every rank gets the whole list
//
// Authenticated exactly like the ring's links (the same token, the same ring id and
// limits in the HELLO), so a process without the token can neither register nor learn
// the addresses. A rank that registers twice, or a server that has not heard from every
// rank by the deadline, ends the rendezvous with an ERROR naming what is missing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/transport.hpp"

namespace ringattn::net::tcp {

struct RendezvousConfig {
  int world = 1;
  std::uint64_t ring_id = 0;
  LinkLimits limits;
  std::string secret;
  std::chrono::milliseconds timeout{60000};  // the whole rendezvous
  std::chrono::milliseconds handshake_timeout{5000};
};

// Serves one rendezvous in a thread of its own, from construction until every rank has
// its list or the timeout passed.
class RendezvousServer {
 public:
  // Binds `listen` ("host:port"; port 0: any free one). Throws NetworkError if it cannot.
  RendezvousServer(const PeerAddress& listen, const RendezvousConfig& config);
  ~RendezvousServer();  // stops it (ranks still waiting get an ERROR)
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  std::uint16_t port() const;
  // Blocks until the rendezvous ended; "" if every rank got the list, else why not.
  std::string wait();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Registers rank `rank` listening at `self` with the rendezvous at `master` (retrying
// while it does not listen yet) and returns every rank's address. Throws NetworkError
// naming the master and the cause, or the server's ERROR.
std::vector<PeerAddress> rendezvous(const PeerAddress& master, int rank, const PeerAddress& self,
                                    const RendezvousConfig& config);

// The address of this machine's interface that traffic to `peer` leaves through (a UDP
// socket "connected" to it; nothing is sent). Throws NetworkError if there is no route.
std::string local_address_towards(const PeerAddress& peer);

}  // namespace ringattn::net::tcp
