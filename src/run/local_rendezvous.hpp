// ringattn — what a launcher serves for the ranks it starts: a fresh ring id and the
// rendezvous on 127.0.0.1 through which they find each other (net/tcp/rendezvous.hpp).
// `run`, `bench api` and `bench overlap` use it with the one launcher (launcher.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "net/tcp/rendezvous.hpp"
#include "ringattn/ring.hpp"

namespace ringattn::run {

// 63 random bits: positive, so it passes the command line's count parser.
std::uint64_t new_ring_id();

// Serves the rendezvous of `world` ranks whose options are `ranks` (their ring limits
// must match), authenticated with `token`, on 127.0.0.1 and a free port (->port()).
// `timeout_seconds` bounds how long it waits for all of them.
std::unique_ptr<net::tcp::RendezvousServer> serve_local_rendezvous(const RingOptions& ranks, int world,
                                                                   std::uint64_t ring_id, const std::string& token,
                                                                   double timeout_seconds);

}  // namespace ringattn::run
