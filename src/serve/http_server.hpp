// ringattn serve — the daemon's one HTTP server: the OpenAI-style endpoint and /metrics,
// /healthz (each on its own port, the same code). cpp-httplib (Debian's libcpp-httplib,
// 0.11) parses and routes; it lacks bounds a server open to untrusted clients needs, so
// every connection is read through a stream of our own and the server adds them:
//   - a request's head is at most `head_bytes` (0.11 limits one header line, not their
//     number: a flood of header lines grew a daemon's memory by 300 MiB in 4 s) — 431;
//   - its body at most `body_bytes` however it is framed (0.11 applies its payload limit to
//     Content-Length only, not to a chunked body);
//   - the whole request, head and body, has one deadline, not each read (a client that
//     sends a byte every few seconds, slowloris, holds a thread for that long at most);
//   - a response given before the body was read (an authentication failure, say) closes
//     the connection, so an unread body is never taken for the next request;
//   - one client address holds at most `per_client` connections at once (the pool's other
//     threads stay for everyone else; a liveness probe gets through while a client hoards).
// Keep-alive: up to `keep_alive_requests` requests on a connection, `idle` between them.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace ringattn::serve {

struct HttpLimits {
  std::size_t head_bytes = 64 << 10;
  std::size_t body_bytes = 1 << 20;
  std::chrono::milliseconds request_deadline{10000};  // head and body, from the first byte waited for
  std::chrono::milliseconds write_deadline{30000};    // each write of the response
  std::chrono::milliseconds idle{5000};               // keep-alive: the next request's first byte
  int threads = 16;                                   // connections served at once
  int per_client = 4;                                 // of them from one address
  int keep_alive_requests = 100;
};

class HttpServer {
 public:
  // Binds `listen` (HOST:PORT or [V6]:PORT; port 0: any free one) at once; throws
  // NetworkError naming `what` (the option it came from) and the address.
  HttpServer(const std::string& listen, const std::string& what, const HttpLimits& limits = {});
  ~HttpServer();  // stops: new connections are refused, open ones end
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  httplib::Server& routes();  // set the handlers before start()
  // Told the status of every answer the server gives itself, before httplib sees the
  // request (431 for a head over the bound, 503 for a client over its connections), so that
  // they are counted like httplib's. Set before start().
  void on_refusal(std::function<void(int status)> f);
  void start();               // serves on a thread of its own
  std::uint16_t port() const { return port_; }
  // On a thread serving a request of some HttpServer (a handler): whether its client has
  // closed the connection (it will read no answer). False elsewhere.
  static bool client_gone();
  const HttpLimits& limits() const { return limits_; }

  class Bounded;  // the httplib::Server with the bounds above

 private:
  HttpLimits limits_;
  std::unique_ptr<Bounded> server_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace ringattn::serve
