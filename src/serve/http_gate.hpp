// ringattn serve — the HTTP server's gate (see http_server.hpp for why): one thread, epoll,
// that accepts every connection, reads each request whole into the connection's buffer
// (RequestFramer) within its deadlines, answers what it refuses itself, and hands a complete
// request to the server's workers (HttpWorkers); after the answer a worker gives the
// connection back, and a kept-alive one waits here for its next request. Nothing here ever
// blocks on a client.
//
// Every open connection counts against `connections` and its address's `per_client`,
// whatever it is doing; the bytes of requests held, read or waiting for a worker, against
// `buffered_bytes` and their address's share of it (a quarter, at least one whole request),
// so one address cannot fill the buffer and get the others a 503. A request waits for a
// worker at most `queue_deadline`, then the gate takes it back and answers 503 itself.
//
// Every connection an answer was written to (a refusal, the last answer of a kept-alive
// one, a refused connection at the door) closes lingering: our side is shut, so the client
// reads the answer and then the end, and the gate reads on and drops what the client still
// sends for a moment (kLinger, kLingerBytes) before closing — closing with unread bytes would
// make the kernel send a reset, which discards what the socket had not sent yet. At most
// kDoorLinger refused connections linger at once beyond `connections`; past that (a flood)
// one is closed at once after reading what it had sent.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

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

// A descriptor closed by its holder's end: the listener passes from HttpServer to the gate
// in one, so that it is closed whichever constructor throws on the way.
class Descriptor {
 public:
  explicit Descriptor(int fd = -1) : fd_(fd) {}
  Descriptor(Descriptor&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Descriptor& operator=(Descriptor&&) = delete;
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// One client connection. The gate owns it; while it is handed over, the worker reads `in`
// and writes the answer, and the gate does not touch it.
struct HttpConnection {
  using Clock = std::chrono::steady_clock;
  HttpConnection(int fd_, std::string client_, int port_, const HttpLimits& l)
      : fd(fd_), client(std::move(client_)), port(port_), framer(l.head_bytes, l.body_bytes) {}

  int fd;
  std::string client;        // its address: the key of the per-address bounds
  int port;
  std::string in;            // received, from the current request's first byte
  std::size_t request = 0;   // when handed over: in[0, request) is one whole request
  bool expects_continue = false;  // that request said "Expect: 100-continue"
  int served = 0;            // requests answered on it

  // The gate's own.
  enum class Phase { reading, idle, handling, lingering } phase = Phase::reading;
  RequestFramer framer;
  // reading: the head's and the request's deadlines; idle, lingering: until; handling: until
  // a worker takes it (max once one has).
  Clock::time_point head_by, until;
  bool continued = false;            // "100 Continue" sent for the current request
  bool admitted = true;              // counted against the connection bounds (false: refused at the door)
  std::size_t counted = 0;           // bytes of `in` counted in the gate's buffered totals
  std::size_t discarded = 0;         // lingering: bytes read and dropped
};

// The workers, as the gate sees them (HttpServer's): both called on the gate thread.
class HttpWorkers {
 public:
  virtual ~HttpWorkers() = default;
  virtual void post(HttpConnection* c) = 0;  // a complete request, for a worker
  // A request past its queue deadline: true, and why it waited, if it was still waiting
  // (it is the gate's again); false if a worker has it.
  virtual bool withdraw(HttpConnection* c, std::string& why) = 0;
};

class HttpGate {
 public:
  using Clock = HttpConnection::Clock;
  // Takes `listener` (bound, listening, non-blocking; closed also if this throws).
  // `workers` get each complete request; `refused` the status of each answer the gate gives.
  HttpGate(Descriptor listener, const HttpLimits& limits, HttpWorkers& workers, const std::function<void(int)>& refused);
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
  static constexpr std::size_t kDoorLinger = 64;

 private:
  void accept_all(Clock::time_point now);
  void admit(int fd, const std::string& client, int port, Clock::time_point now);
  void on_readable(HttpConnection& c, Clock::time_point now);
  void examine(HttpConnection& c, Clock::time_point now);
  void take_back(Clock::time_point now);
  void sweep(Clock::time_point now);
  void start_request(HttpConnection& c, Clock::time_point now);
  void refuse(HttpConnection& c, int status, const std::string& message, const char* code, Clock::time_point now);
  void linger(HttpConnection& c, Clock::time_point now);
  void turn_away(int fd, const std::string& client, int port, const std::string& message, Clock::time_point now);
  void recount(HttpConnection& c, std::size_t bytes);
  std::size_t buffered_by(const std::string& client) const;
  void watch(HttpConnection& c, bool on);
  void due(Clock::time_point t) { next_due_ = std::min(next_due_, t); }
  void close(HttpConnection& c);

  const HttpLimits& l_;
  Descriptor listener_;
  int epoll_ = -1, wake_ = -1;
  HttpWorkers& workers_;
  const std::function<void(int)>& refused_;
  std::unordered_map<int, std::unique_ptr<HttpConnection>> conns_;  // by fd: all open ones, and those lingering after a refusal at the door
  std::map<std::string, int> per_client_;                            // admitted connections by address
  std::size_t door_ = 0;                                             // connections refused at the door, lingering
  std::size_t buffered_ = 0;
  std::map<std::string, std::size_t> buffered_by_;                   // buffered_ by address (none at 0)
  std::size_t share_;                                                // an address's bound of buffered_
  Clock::time_point next_due_ = Clock::time_point::max();  // the earliest deadline (or a retry of accept)
  bool accept_paused_ = false;                             // out of descriptors: retried at the next sweep
  char scratch_[64 << 10];

  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<HttpConnection*, bool>> returned_;  // from workers: (connection, keep)
};

}  // namespace ringattn::serve
