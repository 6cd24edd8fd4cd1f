// ringattn serve — the HTTP server's gate (http_gate.hpp).
#include "http_gate.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace ringattn::serve {
namespace {

constexpr auto kSweep = std::chrono::milliseconds(50);  // deadlines are checked this often at most
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

const char* reason_of(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
  }
}

// An answer the server gives itself, in the shape of the endpoint's errors (OpenAI's).
std::string refusal(int status, const std::string& message, const char* code) {
  const std::string body = R"({"error":{"message":")" + message + R"(","type":"invalid_request_error","param":null,"code":")" + code + "\"}}";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_of(status) + "\r\nContent-Type: application/json\r\nConnection: close\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The gate never waits on a client: what the socket does not take at once is dropped (an
// answer this small always fits a socket nothing was written to yet).
void send_now(int fd, const std::string& s) { [[maybe_unused]] const auto n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT); }

std::string seconds(std::chrono::milliseconds d) {
  const auto ms = d.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

}  // namespace

std::string socket_address(const sockaddr_storage& a, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  } else {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  }
  return text;
}

HttpGate::HttpGate(Descriptor listener, const HttpLimits& limits, HttpWorkers& workers, const std::function<void(int)>& refused)
    : l_(limits),
      listener_(std::move(listener)),
      workers_(workers),
      refused_(refused),
      // A quarter of the whole, but room for one whole request at least.
      share_(std::min(limits.buffered_bytes, std::max(limits.buffered_bytes / 4, limits.head_bytes + limits.body_bytes))) {
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_ = epoll_ < 0 ? -1 : ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_ < 0 || wake_ < 0) {  // the listener closes with its member
    const int e = errno;
    if (epoll_ >= 0) ::close(epoll_);
    throw std::system_error(e, std::generic_category(), "the HTTP server's gate (epoll, eventfd)");
  }
  for (const int fd : {listener_.get(), wake_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
  }
}

HttpGate::~HttpGate() {
  for (auto& [fd, c] : conns_) {
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
  }
  ::close(wake_);
  ::close(epoll_);
}  // the listener closes with its member

void HttpGate::stop() {
  stop_ = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_, &one, sizeof one);
}

void HttpGate::give_back(HttpConnection* c, bool keep) {
  {
    std::lock_guard lock(mu_);
    returned_.emplace_back(c, keep);
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_, &one, sizeof one);
}

void HttpGate::run() {
  epoll_event events[64];
  while (!stop_) {
    int timeout = -1;
    if (next_due_ != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(next_due_ - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<std::int64_t>(left, 0, 60000));
    }
    const int n = ::epoll_wait(epoll_, events, 64, timeout);
    const auto now = Clock::now();
    for (int i = 0; i < n && !stop_; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_) {
        std::uint64_t count;
        [[maybe_unused]] const auto r = ::read(wake_, &count, sizeof count);
        take_back(now);
      } else if (fd == listener_.get()) {
        accept_all(now);
      } else if (const auto it = conns_.find(fd); it != conns_.end()) {
        on_readable(*it->second, now);
      }
    }
    if (now >= next_due_) sweep(now);
  }
  // Stopping: the gate's destructor closes every connection, once the workers are done.
}

void HttpGate::accept_all(Clock::time_point now) {
  for (;;) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the rest wait in the backlog until some close.
        epoll_event ev{};
        ev.data.fd = listener_.get();
        ::epoll_ctl(epoll_, EPOLL_CTL_MOD, listener_.get(), &ev);
        accept_paused_ = true;
        due(now + kAcceptRetry);
      }
      return;
    }
    int port = 0;
    admit(fd, socket_address(a, port), port, now);
  }
}

void HttpGate::admit(int fd, const std::string& client, int port, Clock::time_point now) {
  const auto held = per_client_.find(client);
  if (conns_.size() - door_ >= static_cast<std::size_t>(l_.connections)) {
    turn_away(fd, client, port, "this server holds its limit of " + std::to_string(l_.connections) + " connections; try again shortly", now);
    return;
  }
  if (held != per_client_.end() && held->second >= l_.per_client) {
    turn_away(fd, client, port,
              "this address already holds " + std::to_string(l_.per_client) + " connections to this server; reuse one (keep-alive) or close one", now);
    return;
  }
  auto c = std::make_unique<HttpConnection>(fd, client, port, l_);
  start_request(*c, now);  // from the accept: a connection that never sends is cut like one that dribbles
  ++per_client_[client];
  HttpConnection& added = *conns_.emplace(fd, std::move(c)).first->second;
  watch(added, true);
}

// A connection past a connection bound: the 503, then a lingering close outside the bounds
// (a few; a flood's are closed at once once what they sent is read).
void HttpGate::turn_away(int fd, const std::string& client, int port, const std::string& message, Clock::time_point now) {
  send_now(fd, refusal(503, message, "too_many_connections"));
  if (refused_) refused_(503);
  if (door_ >= kDoorLinger) {  // what it sent so far is read, so that the close finds nothing unread (a reset)
    for (int reads = 0; reads < 16 && ::recv(fd, scratch_, sizeof scratch_, MSG_DONTWAIT) > 0; ++reads) {
    }
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
    return;
  }
  auto c = std::make_unique<HttpConnection>(fd, client, port, l_);
  c->admitted = false;
  ++door_;
  HttpConnection& added = *conns_.emplace(fd, std::move(c)).first->second;
  watch(added, true);
  linger(added, now);
}

void HttpGate::start_request(HttpConnection& c, Clock::time_point now) {
  c.phase = HttpConnection::Phase::reading;
  c.framer.reset();
  c.continued = false;
  c.until = now + l_.request_deadline;
  c.head_by = std::min(c.until, now + l_.head_deadline);
  due(c.head_by);
}

void HttpGate::on_readable(HttpConnection& c, Clock::time_point now) {
  using Phase = HttpConnection::Phase;
  if (c.phase == Phase::handling) return;  // not watched meanwhile
  const ssize_t n = ::recv(c.fd, scratch_, sizeof scratch_, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {  // the client closed (a half-read request gets no answer) or the connection failed
    close(c);
    return;
  }
  const auto got = static_cast<std::size_t>(n);
  if (c.phase == Phase::lingering) {
    if ((c.discarded += got) > kLingerBytes) close(c);
    return;
  }
  if (c.phase == Phase::idle) start_request(c, now);  // the next request's deadlines run from its first byte
  c.in.append(scratch_, got);
  recount(c, c.counted + got);
  // The address's share first: one that fills it is refused, not whoever reads next.
  if (buffered_by(c.client) > share_) {
    refuse(c, 503, "this address's requests being read or waiting for a worker hold its share of " + size_text(share_) + " (of " +
                       size_text(l_.buffered_bytes) + " for all); finish or close one, or try again shortly",
           "server_busy", now);
    return;
  }
  if (buffered_ > l_.buffered_bytes) {
    refuse(c, 503, "this server holds its limit of " + size_text(l_.buffered_bytes) + " of requests being read; try again shortly",
           "server_busy", now);
    return;
  }
  examine(c, now);
}

void HttpGate::examine(HttpConnection& c, Clock::time_point now) {
  switch (c.framer.scan(c.in)) {
    case RequestFramer::Step::more:
      // The body comes after the head: a client that waits for leave to send it gets it now.
      if (c.framer.head_done() && c.framer.expects_continue() && !c.continued) {
        send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
        c.continued = true;
      }
      return;
    case RequestFramer::Step::refused: {
      const HttpRefusal& r = c.framer.refusal();
      refuse(c, r.status, r.message, r.code, now);
      return;
    }
    case RequestFramer::Step::complete:
      watch(c, false);
      c.phase = HttpConnection::Phase::handling;
      c.request = c.framer.length();
      c.expects_continue = c.framer.expects_continue();
      c.until = now + l_.queue_deadline;  // until a worker takes it
      due(c.until);
      workers_.post(&c);
      return;
  }
}

void HttpGate::take_back(Clock::time_point now) {
  std::vector<std::pair<HttpConnection*, bool>> back;
  {
    std::lock_guard lock(mu_);
    back.swap(returned_);
  }
  for (const auto& [c, keep] : back) {
    recount(*c, c->in.size());  // the worker took its request's bytes off
    watch(*c, true);
    if (!keep) {  // an answer was written: unread bytes (pipelined, say) must not reset it
      linger(*c, now);
      continue;
    }
    if (c->in.empty()) {
      c->phase = HttpConnection::Phase::idle;
      c->until = now + l_.idle;
      due(c->until);
    } else {  // pipelined: the next request's first bytes are here already, maybe all of it
      start_request(*c, now);
      examine(*c, now);
    }
  }
}

void HttpGate::sweep(Clock::time_point now) {
  using Phase = HttpConnection::Phase;
  next_due_ = Clock::time_point::max();
  if (accept_paused_) {
    accept_paused_ = false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = listener_.get();
    ::epoll_ctl(epoll_, EPOLL_CTL_MOD, listener_.get(), &ev);
  }
  std::vector<HttpConnection*> expired;
  for (auto& [fd, c] : conns_) {
    if (c->phase == Phase::handling && c->until == Clock::time_point::max()) continue;  // a worker has it
    const bool head = c->phase == Phase::reading && !c->framer.head_done();
    const auto by = head ? c->head_by : c->until;
    if (now >= by)
      expired.push_back(c.get());
    else
      due(by);
  }
  for (HttpConnection* c : expired) {
    if (c->phase == Phase::handling) {  // waited for a worker past its deadline, or taken by one meanwhile
      std::string why;
      if (workers_.withdraw(c, why)) {
        watch(*c, true);
        refuse(*c, 503, "this request waited " + seconds(l_.queue_deadline) + " for a worker: " + why + "; try again shortly", "server_busy",
               now);
      } else {
        c->until = Clock::time_point::max();  // the write deadline is the worker's
      }
    } else if (c->phase == Phase::reading && !c->in.empty()) {  // a request begun, not finished: say why it is cut
      const bool head = !c->framer.head_done();
      refuse(*c, 408,
             std::string("the request's ") + (head ? "head" : "body") + " did not arrive within " +
                 seconds(head ? std::min(l_.head_deadline, l_.request_deadline) : l_.request_deadline),
             "request_timeout", now);
    } else {
      close(*c);
    }
  }
  next_due_ = std::max(next_due_, now + kSweep);
}

void HttpGate::refuse(HttpConnection& c, int status, const std::string& message, const char* code, Clock::time_point now) {
  send_now(c.fd, refusal(status, message, code));
  if (refused_) refused_(status);
  linger(c, now);
}

// After an answer: our side ends (the client reads the answer, then the end), what the client
// still sends is read and dropped until it closes too, kLinger passes or kLingerBytes arrive.
void HttpGate::linger(HttpConnection& c, Clock::time_point now) {
  ::shutdown(c.fd, SHUT_WR);
  c.phase = HttpConnection::Phase::lingering;
  c.until = now + kLinger;
  due(c.until);
  recount(c, 0);
  std::string().swap(c.in);
}

void HttpGate::recount(HttpConnection& c, std::size_t bytes) {
  if (bytes == c.counted) return;
  buffered_ = buffered_ - c.counted + bytes;
  std::size_t& mine = buffered_by_[c.client];
  mine = mine - c.counted + bytes;
  if (mine == 0) buffered_by_.erase(c.client);
  c.counted = bytes;
}

std::size_t HttpGate::buffered_by(const std::string& client) const {
  const auto it = buffered_by_.find(client);
  return it == buffered_by_.end() ? 0 : it->second;
}

void HttpGate::watch(HttpConnection& c, bool on) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c.fd;
  ::epoll_ctl(epoll_, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, c.fd, &ev);
}

void HttpGate::close(HttpConnection& c) {
  const int fd = c.fd;
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);  // leaves the epoll set with it
  recount(c, 0);
  if (!c.admitted)
    --door_;
  else if (const auto it = per_client_.find(c.client); it != per_client_.end() && --it->second <= 0)
    per_client_.erase(it);
  conns_.erase(fd);
}

}  // namespace ringattn::serve
