#include "src/run/local_rendezvous.hpp"

#include <algorithm>
#include <chrono>
#include <span>

#include "net/secret.hpp"
#include "ring/internals.hpp"

namespace ringattn::run {

std::uint64_t new_ring_id() {
  std::uint64_t id = 0;
  net::fill_random(std::span<std::byte>(reinterpret_cast<std::byte*>(&id), sizeof id));
  return id >> 1;
}

std::unique_ptr<net::tcp::RendezvousServer> serve_local_rendezvous(const RingOptions& ranks, int world,
                                                                   std::uint64_t ring_id, const std::string& token,
                                                                   double timeout_seconds) {
  net::tcp::RendezvousConfig rc;
  rc.world = world;
  rc.ring_id = ring_id;
  rc.limits = RingInternals::link_limits(ranks);
  rc.secret = token;
  rc.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000));
  rc.handshake_timeout = std::min(std::chrono::milliseconds(5000), rc.timeout);
  return std::make_unique<net::tcp::RendezvousServer>(net::PeerAddress{"127.0.0.1", 0}, rc);
}

}  // namespace ringattn::run
