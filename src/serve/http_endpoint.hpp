// ringattn serve — the minimal HTTP/1.1 endpoint for /metrics and /healthz.
//
// GET only, one request per connection (Connection: close), request head at most 8 KiB
// and read within a deadline, at most 32 connections at once: a probe or a scraper can
// neither hold the daemon's resources nor disturb its ring. Runs on a thread of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ringattn::serve {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpEndpoint {
 public:
  // Called on the endpoint's thread with the request path (query string removed); must
  // not block for long.
  using Handler = std::function<HttpResponse(const std::string& path)>;

  // Binds `listen` ("host:port", port 0 = any free one) and serves until destroyed.
  // Throws ringattn::NetworkError naming the address if it cannot bind.
  HttpEndpoint(const std::string& listen, Handler handler);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  std::uint16_t port() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringattn::serve
