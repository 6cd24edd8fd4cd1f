// ringattn — what a launcher serves for the ranks it starts: the rendezvous on 127.0.0.1
// through which they find each other (ringattn/launch.hpp). `run`, `bench api`, `bench
// decode` and `bench overlap` use it with the one launcher (launcher.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ringattn/launch.hpp"

namespace ringattn::run {

// Serves the rendezvous of `world` ranks whose options are `ranks` (their ring limits
// must match), ring `ring_id`, authenticated with `token`, on 127.0.0.1 and a free port
// (->port()). `timeout_seconds` bounds how long it waits for all of them.
std::unique_ptr<RendezvousServer> serve_local_rendezvous(RingOptions ranks, int world, std::uint64_t ring_id,
                                                         const std::string& token, double timeout_seconds);

}  // namespace ringattn::run
