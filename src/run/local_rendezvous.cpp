#include "local_rendezvous.hpp"

namespace ringattn::run {

std::unique_ptr<RendezvousServer> serve_local_rendezvous(RingOptions ranks, int world, std::uint64_t ring_id,
                                                         const std::string& token, double timeout_seconds) {
  ranks.world_size = world;
  ranks.ring_id = ring_id;
  ranks.token = token;
  ranks.token_file.clear();
  return std::make_unique<RendezvousServer>("127.0.0.1:0", ranks, timeout_seconds);
}

}  // namespace ringattn::run
