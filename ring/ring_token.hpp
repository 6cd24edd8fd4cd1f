// ringattn — what a ring's connect and a launcher's RendezvousServer share: the token of a
// RingOptions and the rendezvous's configuration (ring/launch.cpp), written once.
#pragma once

#include <chrono>
#include <string>

#include "net/tcp/rendezvous.hpp"
#include "ringattn/ring.hpp"

namespace ringattn::ring {

// RingOptions::token (checked), else its token_file, else RINGATTN_TOKEN; InvalidArgument
// naming the source and the fix otherwise.
std::string token_of(const RingOptions& o);

// The rendezvous of the ring `o` describes (world, ring id, limits and job digest),
// authenticated with `secret`, within `timeout` (each handshake within 5 s of it).
net::tcp::RendezvousConfig rendezvous_config(const RingOptions& o, std::string secret, std::chrono::milliseconds timeout);

}  // namespace ringattn::ring
