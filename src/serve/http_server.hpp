// ringattn serve — the daemon's one HTTP server: the OpenAI-style endpoint and /metrics,
// /healthz (each on its own port, the same code). cpp-httplib (Debian's libcpp-httplib,
// 0.11) parses and routes; it lacks bounds a server open to untrusted clients needs, and its
// thread per connection lets a few addresses that send a header byte a second (slowloris)
// hold every thread: 64 such connections from 4 addresses kept a client from 127.0.0.1
// unanswered for 15 s, and its listen backlog of 5 reset a third of a burst's connections.
//
// So httplib only answers; connections are ours (http_gate.hpp). One gate thread (epoll)
// accepts, reads each connection's request whole — head, then body by Content-Length or
// chunked framing (http_framing.hpp) — into the connection's buffer, and hands only a
// COMPLETE request to one of `threads` workers, which runs httplib's process_request on
// those bytes and writes the answer. A kept-alive connection then goes back to the gate to
// wait for its next request (bytes pipelined behind the last one stay with it). A client
// that dribbles costs a buffer and a deadline, never a thread; workers are only ever busy
// with requests that have fully arrived, the longest waiting one of the address with the
// fewest being answered first, and one address holds only a share of them at once.
//
// The bounds, with their defaults (HttpLimits):
//   - open connections: `connections` (1024), of them `per_client` (64) from one address,
//     whatever they are doing — 503 `too_many_connections` past either;
//   - a request's head at most `head_bytes` (64 KiB) — 431 `request_too_large` (0.11 limits
//     one header line, not their number: a flood of lines grew a daemon by 300 MiB in 4 s);
//   - its body at most `body_bytes` (1 MiB) however it is framed — 413 `request_too_large`:
//     by Content-Length at once, nothing of it read; chunked as soon as the chunk sizes pass
//     the bound (0.11 bounds a Content-Length only); chunked framing that is malformed, or
//     that httplib could read differently, is 400 `malformed_request`;
//   - the head within `head_deadline` (5 s) and the whole request within `request_deadline`
//     (10 s), both from the accept or, on a kept-alive connection, the request's first byte
//     — 408 `request_timeout` and closed if it had begun;
//   - the requests being read or waiting for a worker hold at most `buffered_bytes` (64 MiB)
//     together (1024 bodies of 1 MiB would be a gigabyte), those of one address at most a
//     quarter of it (but one whole request, head_bytes + body_bytes, at least) — 503
//     `server_busy` for the connection whose bytes pass either, so 64 connections of one
//     address sending 1 MiB bodies are refused their share's excess and leave the rest to
//     others;
//   - the requests of one address being answered at once at most `per_client_busy` (0, the
//     default: a quarter of `threads`, at least 1) — its further complete requests wait while
//     other addresses' are answered, so one address cannot hold every worker;
//   - a complete request waits for a worker at most `queue_deadline` (30 s) — 503
//     `server_busy` naming why (its address's share of the workers, or all of them, busy);
//   - a sized answer (Content-Length: a body, an error) is written whole within
//     `write_deadline` (30 s) from its first byte, so a client draining a little now and then
//     cannot hold a worker for long; a streamed one (chunked, or to the close) each write
//     within it — how long a stream may last is its handler's to say (its own silence rules);
//   - keep-alive: up to `keep_alive_requests` (100) a connection, `idle` (5 s) between them;
//   - an answer given before httplib read the body (an authentication failure, say) closes
//     the connection, so an unread body is never taken for the next request.
// Every connection an answer was written to closes lingering (http_gate.hpp), so the client
// reads the answer rather than a reset. The listen backlog is 1024 (the kernel caps it at
// net.core.somaxconn) so bursts queue instead of being reset.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ringattn::serve {

struct HttpLimits {
  std::size_t head_bytes = 64 << 10;
  std::size_t body_bytes = 1 << 20;
  std::chrono::milliseconds head_deadline{5000};      // the head, from the accept or the request's first byte
  std::chrono::milliseconds request_deadline{10000};  // head and body, from the same moment
  std::chrono::milliseconds write_deadline{30000};    // a sized answer whole; a streamed one each write
  std::chrono::milliseconds idle{5000};               // keep-alive: the next request's first byte
  std::chrono::milliseconds queue_deadline{30000};    // a complete request waiting for a worker
  int connections = 1024;                             // open at once, whatever they are doing
  int per_client = 64;                                // of them from one address
  int threads = 16;                                   // requests answered at once (only complete ones)
  int per_client_busy = 0;                            // of them for one address (0: max(1, threads / 4))
  std::size_t buffered_bytes = 64 << 20;              // requests read or waiting for a worker, together (an address: a quarter)
  int keep_alive_requests = 100;
};

class HttpServer {
 public:
  // Binds `listen` (HOST:PORT or [V6]:PORT; port 0: any free one) at once; throws
  // NetworkError naming `what` (the option it came from) and the address, InvalidArgument
  // naming the field for a limit below 1 (per_client_busy: below 0). limits() has
  // per_client_busy resolved.
  HttpServer(const std::string& listen, const std::string& what, const HttpLimits& limits = {});
  // Stops: new connections are refused, open ones end; a handler still running is told its
  // client is gone (client_gone()) and its writes fail, and it is waited for.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  httplib::Server& routes();  // set the handlers before start()
  // Told the status of every answer the server gives itself, before httplib sees the
  // request (400, 408, 413, 431, 503 above), so that they are counted like httplib's. Set
  // before start().
  void on_refusal(std::function<void(int status)> f);
  void start();               // serves on threads of its own: the gate and the workers
  std::uint16_t port() const { return port_; }
  // On a thread serving a request of some HttpServer (a handler): whether its client has
  // closed the connection, or the server is stopping (either way no answer will be read).
  // False elsewhere.
  static bool client_gone();
  const HttpLimits& limits() const { return limits_; }

  class Bounded;  // the httplib::Server answering what the gate hands over

 private:
  HttpLimits limits_;
  std::unique_ptr<Bounded> server_;
  std::uint16_t port_ = 0;
};

}  // namespace ringattn::serve
