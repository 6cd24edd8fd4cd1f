// ringattn serve — the control port: clients (submit, status) connect here, prove the
// token (ringattn/channel.hpp), and ask. One Asio thread; each connection is a coroutine
// with deadlines; at most kMaxConnections at once: up to kMaxOverLimit more are
// authenticated and told the daemon is at its limit, any beyond those closed at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "metrics.hpp"
#include "ring_service.hpp"

namespace ringattn::serve {

class ControlServer {
 public:
  static constexpr int kMaxConnections = 16;
  static constexpr int kMaxOverLimit = 4;
  // Binds `listen` ("host:port"); throws NetworkError naming it if it cannot.
  ControlServer(const std::string& listen, std::string secret, bool tls, double timeout_seconds, RingService& service,
                Metrics& metrics);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;
  std::uint16_t port() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringattn::serve
