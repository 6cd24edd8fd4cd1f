// ringattn serve — the HTTP server's gate (see http_server.hpp for why): one thread, epoll,
// that accepts every connection, reads each request whole into the connection's buffer
// (RequestFramer) within its deadlines, answers what it refuses itself, and hands a complete
// request to the server's workers; after the answer a worker gives the connection back, and a
// kept-alive one waits here for its next request. Nothing here ever blocks on a client.
//
// Every open connection counts against `connections` and its address's `per_client`,
// whatever it is doing; the bytes of requests held, read or waiting for a worker, against
// `buffered_bytes`. A refusal sent while the client may still be sending shuts our side and
// reads on for a moment (kLinger, kLingerBytes) before closing, so that the client reads the
// answer instead of a reset.
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "http_framing.hpp"
#include "http_server.hpp"

namespace ringattn::serve {

// A socket address as text ("127.0.0.1", "::1") and its port.
std::string socket_address(const sockaddr_storage& a, int& port);

// One client connection. The gate owns it; while it is handed over, the worker reads `in`
// and writes the answer, and the gate does not touch it.
struct HttpConnection {
  using Clock = std::chrono::steady_clock;
  HttpConnection(int fd_, std::string client_, int port_, const HttpLimits& l)
      : fd(fd_), client(std::move(client_)), port(port_), framer(l.head_bytes, l.body_bytes) {}

  int fd;
  std::string client;        // its address: the key of the per_client bound
  int port;
  std::string in;            // received, from the current request's first byte
  std::size_t request = 0;   // when handed over: in[0, request) is one whole request
  bool expects_continue = false;  // that request said "Expect: 100-continue"
  int served = 0;            // requests answered on it

  // The gate's own.
  enum class Phase { reading, idle, handling, lingering } phase = Phase::reading;
  RequestFramer framer;
  Clock::time_point head_by, until;  // reading: the head's and the request's deadlines; idle, lingering: until
  bool continued = false;            // "100 Continue" sent for the current request
  std::size_t counted = 0;           // bytes of `in` counted in the gate's buffered total
  std::size_t discarded = 0;         // lingering: bytes read and dropped
};

class HttpGate {
 public:
  using Clock = HttpConnection::Clock;
  // Takes `listener` (bound, listening, non-blocking). `hand_over` runs on the gate thread
  // with each complete request; `refused` with the status of each answer the gate gives.
  HttpGate(int listener, const HttpLimits& limits, std::function<void(HttpConnection*)> hand_over,
           const std::function<void(int)>& refused);
  ~HttpGate();  // closes every connection and the listener: call once run() has returned
  HttpGate(const HttpGate&) = delete;
  HttpGate& operator=(const HttpGate&) = delete;

  void run();   // the gate's thread, until stop()
  void stop();  // any thread: run() returns soon
  // A worker is done with `c`: keep it (wait for its next request, or serve the one already
  // buffered) or close it.
  void give_back(HttpConnection* c, bool keep);

  static constexpr auto kLinger = std::chrono::seconds(2);
  static constexpr std::size_t kLingerBytes = 8 << 20;

 private:
  void accept_all(Clock::time_point now);
  void admit(int fd, const std::string& client, int port, Clock::time_point now);
  void on_readable(HttpConnection& c, Clock::time_point now);
  void examine(HttpConnection& c, Clock::time_point now);
  void take_back(Clock::time_point now);
  void sweep(Clock::time_point now);
  void start_request(HttpConnection& c, Clock::time_point now);
  void refuse(HttpConnection& c, int status, const std::string& message, const char* code, Clock::time_point now);
  void watch(HttpConnection& c, bool on);
  void due(Clock::time_point t) { next_due_ = std::min(next_due_, t); }
  void close(HttpConnection& c);

  const HttpLimits& l_;
  int listener_, epoll_ = -1, wake_ = -1;
  std::function<void(HttpConnection*)> hand_over_;
  const std::function<void(int)>& refused_;
  std::unordered_map<int, std::unique_ptr<HttpConnection>> conns_;  // by fd: all open ones
  std::map<std::string, int> per_client_;                            // open connections by address
  std::size_t buffered_ = 0;
  Clock::time_point next_due_ = Clock::time_point::max();  // the earliest deadline (or a retry of accept)
  bool accept_paused_ = false;                             // out of descriptors: retried at the next sweep
  char scratch_[64 << 10];

  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<HttpConnection*, bool>> returned_;  // from workers: (connection, keep)
};

}  // namespace ringattn::serve
