// The launcher's toolkit (include/ringattn/launch.hpp) over the net floor's token and
// rendezvous code: the one place programs reach them from.
#include "ringattn/launch.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <span>

#include "net/secret.hpp"
#include "ringattn/error.hpp"
#include "net/tcp/rendezvous.hpp"
#include "net/transport.hpp"
#include "ring/internals.hpp"
#include "ring/ring_token.hpp"
#include "ring/timeouts.hpp"

namespace ringattn {

static_assert(std::string_view(kTokenEnv) == net::kTokenEnv);

std::string load_token(const std::string& token_file) { return net::load_secret(token_file); }

std::string checked_token(std::string token, const std::string& source) {
  return net::checked_secret(std::move(token), source);
}

std::string launcher_token() {
  const char* env = std::getenv(kTokenEnv);
  return env && *env ? checked_token(env, std::string("environment variable ") + kTokenEnv) : generate_token();
}

std::string generate_token() { return net::generate_secret(); }

std::string token_fingerprint(const std::string& token) { return net::secret_fingerprint(token); }

std::uint64_t new_ring_id() {
  std::uint64_t id = 0;
  net::fill_random(std::span<std::byte>(reinterpret_cast<std::byte*>(&id), sizeof id));
  return id >> 1;
}

std::string HostPort::text() const { return net::PeerAddress{host, port}.text(); }

HostPort parse_host_port(const std::string& text, const std::string& what) {
  const auto a = net::parse_peer_address(text, what);
  return {a.host, a.port};
}

std::string local_address_towards(const std::string& peer) {
  return net::tcp::local_address_towards(net::parse_peer_address(peer, "peer address"));
}

namespace ring {

std::string token_of(const RingOptions& o) {
  if (!o.token.empty()) return checked_token(o.token, "RingOptions::token");
  return load_token(o.token_file);  // the file, or RINGATTN_TOKEN, or a clear error
}

net::tcp::RendezvousConfig rendezvous_config(const RingOptions& o, std::string secret, std::chrono::milliseconds timeout) {
  net::tcp::RendezvousConfig rc;
  rc.world = o.world_size;
  rc.ring_id = o.ring_id;
  rc.limits = RingInternals::link_limits(o);
  rc.secret = std::move(secret);
  rc.timeout = timeout;
  rc.handshake_timeout = std::min(std::chrono::milliseconds(5000), timeout);
  return rc;
}

}  // namespace ring

struct RendezvousServer::Impl {
  std::unique_ptr<net::tcp::RendezvousServer> server;
};

RendezvousServer::RendezvousServer(const std::string& listen, const RingOptions& ranks, double timeout_seconds)
    : impl_(std::make_unique<Impl>()) {
  const std::chrono::milliseconds timeout = ring::timeout_ms(timeout_seconds, "RendezvousServer: timeout_seconds");
  if (ranks.world_size < 1 || ranks.world_size > kMaxWorldSize)
    throw InvalidArgument("RendezvousServer: world_size = " + std::to_string(ranks.world_size) + " must be in 1.." +
                          std::to_string(kMaxWorldSize));
  const net::tcp::RendezvousConfig rc = ring::rendezvous_config(ranks, ring::token_of(ranks), timeout);
  impl_->server = std::make_unique<net::tcp::RendezvousServer>(net::parse_peer_address(listen, "rendezvous address"), rc);
}

RendezvousServer::~RendezvousServer() = default;

std::uint16_t RendezvousServer::port() const { return impl_->server->port(); }

std::string RendezvousServer::wait() { return impl_->server->wait(); }

}  // namespace ringattn
