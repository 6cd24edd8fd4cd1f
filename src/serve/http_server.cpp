// ringattn serve — the daemon's HTTP server (http_server.hpp): httplib::Server with each
// connection read through BoundedStream and served by our own keep-alive loop.
#include "http_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "ringattn/error.hpp"
#include "ringattn/launch.hpp"

namespace ringattn::serve {
namespace {

using Clock = std::chrono::steady_clock;
thread_local int serving_fd = -1;  // the connection this thread is serving a request on
constexpr auto kSlice = std::chrono::milliseconds(100);  // how soon a wait notices the server stopping

std::string address_of(const sockaddr_storage& a, int& port) {
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

std::string peer_of(int fd, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) return "?";
  return address_of(a, port);
}

void send_all(int fd, const std::string& s) {
  std::size_t at = 0;
  while (at < s.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 1000) <= 0) return;
    const ssize_t n = ::send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;
    at += static_cast<std::size_t>(n);
  }
}

// A refusal written before httplib saw the request (it could not, or must not, read it).
std::string refusal(int status, const char* reason, const std::string& message, const char* code) {
  const std::string body = R"({"error":{"message":")" + message + R"(","type":"invalid_request_error","param":null,"code":")" + code + "\"}}";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: application/json\r\nConnection: close\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Reads one connection's requests within the bounds; see http_server.hpp.
class BoundedStream final : public httplib::Stream {
 public:
  BoundedStream(int fd, const HttpLimits& l, const std::atomic<bool>& stopping, const std::function<void(int)>& refused)
      : fd_(fd), l_(l), stopping_(stopping), refused_(refused) {}

  // Waits up to `idle` for the next request's first byte; false when none comes.
  bool next_request() {
    if (at_ < len_) return true;  // already read with the last request (pipelined)
    const auto until = Clock::now() + l_.idle;
    for (;;) {
      if (stopping_) return false;
      const auto left = until - Clock::now();
      if (left <= Clock::duration::zero()) return false;
      const int r = wait(POLLIN, std::min<Clock::duration>(left, kSlice));
      if (r != 0) return r > 0;
    }
  }
  void begin_request() {
    deadline_ = Clock::now() + l_.request_deadline;
    head_ = body_ = 0;
    in_head_ = true;
    matched_ = 0;
    declared_ = 0;
    framed_ = false;
    head_full_ = false;
  }
  // Called once the head is parsed: what the body should be.
  void note(const httplib::Request& req) {
    framed_ = req.has_header("Transfer-Encoding");
    const std::string n = req.get_header_value("Content-Length");
    declared_ = n.empty() ? 0 : std::strtoull(n.c_str(), nullptr, 10);
  }
  bool head_full() const { return head_full_; }
  // The response came before the whole body was read: the rest must not be taken for the
  // next request.
  bool body_unread() const { return framed_ || (in_head_ ? declared_ > 0 : body_ < declared_); }

  bool is_readable() const override { return at_ < len_ || const_cast<BoundedStream*>(this)->wait_for_request_byte() > 0; }
  bool is_writable() const override { return wait(POLLOUT, l_.write_deadline) > 0; }

  ssize_t read(char* ptr, std::size_t size) override {
    std::size_t allow = 0;
    if (in_head_) {
      allow = l_.head_bytes - std::min(head_, l_.head_bytes);
      if (allow == 0) {  // answered here: httplib would call a cut head malformed (400)
        if (!head_full_) {
          send_all(fd_, refusal(431, "Request Header Fields Too Large",
                                "the request's head is over " + std::to_string(l_.head_bytes) + " bytes", "request_too_large"));
          if (refused_) refused_(431);
        }
        head_full_ = true;
        return -1;
      }
    } else {
      const std::size_t budget = l_.body_bytes + (64 << 10);  // the body and a chunked body's framing
      allow = budget - std::min(body_, budget);
      if (allow == 0) return -1;
    }
    if (at_ == len_) {  // httplib reads a head byte by byte: one recv() serves many
      if (wait_for_request_byte() <= 0) return -1;
      const ssize_t n = ::recv(fd_, buf_, sizeof buf_, 0);
      if (n <= 0) return n;
      at_ = 0;
      len_ = static_cast<std::size_t>(n);
    }
    const std::size_t k = std::min({size, allow, len_ - at_});
    std::memcpy(ptr, buf_ + at_, k);
    at_ += k;
    account(ptr, k);
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, std::size_t size) override {
    if (head_full_ || wait(POLLOUT, l_.write_deadline) <= 0) return -1;
    return ::send(fd_, ptr, size, MSG_NOSIGNAL);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = peer_of(fd_, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t n = sizeof a;
    ip = ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n) == 0 ? address_of(a, port) : "?";
  }
  int socket() const override { return fd_; }

 private:
  // poll() for `events` up to `wait`: 1 ready, 0 timed out, -1 failed.
  int wait(short events, Clock::duration wait) const {
    pollfd p{fd_, events, 0};
    const int ms = static_cast<int>(std::max<std::int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
    const int r = ::poll(&p, 1, ms);
    return r > 0 ? 1 : r == 0 ? 0 : -1;
  }
  // Waits for a byte of the request, within its one deadline.
  int wait_for_request_byte() {
    for (;;) {
      if (stopping_) return -1;
      const auto left = deadline_ - Clock::now();
      if (left <= Clock::duration::zero()) return 0;
      const int r = wait(POLLIN, std::min<Clock::duration>(left, kSlice));
      if (r != 0) return r;
    }
  }
  // Counts head and body bytes: the head ends at its first empty line.
  void account(const char* p, std::size_t n) {
    std::size_t i = 0;
    while (in_head_ && i < n) {
      const char c = p[i++];
      static constexpr char kEnd[] = "\r\n\r\n";
      matched_ = c == kEnd[matched_] ? matched_ + 1 : (c == '\r' ? 1 : 0);
      if (matched_ == 4) in_head_ = false;
    }
    head_ += i;
    body_ += n - i;
  }

  int fd_;
  const HttpLimits& l_;
  const std::atomic<bool>& stopping_;
  const std::function<void(int)>& refused_;
  Clock::time_point deadline_ = Clock::now();
  std::size_t head_ = 0, body_ = 0;
  bool in_head_ = true, head_full_ = false, framed_ = false;
  int matched_ = 0;
  std::uint64_t declared_ = 0;
  char buf_[4096];
  std::size_t at_ = 0, len_ = 0;  // buf_[at_, len_): received, not yet handed to httplib
};

}  // namespace

class HttpServer::Bounded final : public httplib::Server {
 public:
  explicit Bounded(const HttpLimits& l) : l_(l) {}
  // Set before stop(): httplib says it runs until its pool has joined, so connections
  // waiting on a client look here to end at once.
  std::atomic<bool> stopping{false};
  std::function<void(int)> refused;  // HttpServer::on_refusal

 private:
  // httplib calls this (virtually) on a pool thread for every accepted connection.
  bool process_and_close_socket(int sock) override {
    int port = 0;
    const std::string client = peer_of(sock, port);
    bool ok = false;
    if (!enter(client)) {
      send_all(sock, refusal(503, "Service Unavailable",
                             "this address already holds " + std::to_string(l_.per_client) +
                                 " connections to this server; reuse one (keep-alive) or close one",
                             "too_many_connections"));
      if (refused) refused(503);
    } else {
      BoundedStream s(sock, l_, stopping, refused);
      for (int left = l_.keep_alive_requests; left > 0 && s.next_request(); --left) {
        s.begin_request();
        bool closed = false;
        serving_fd = sock;
        ok = process_request(s, left == 1, closed, [&s](httplib::Request& req) { s.note(req); });
        serving_fd = -1;
        if (!ok || closed || s.head_full() || s.body_unread()) break;
      }
      leave(client);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  bool enter(const std::string& client) {
    std::lock_guard lock(mu_);
    int& n = clients_[client];
    if (n >= l_.per_client) return false;
    ++n;
    return true;
  }
  void leave(const std::string& client) {
    std::lock_guard lock(mu_);
    if (--clients_[client] <= 0) clients_.erase(client);
  }

  const HttpLimits& l_;
  std::mutex mu_;
  std::map<std::string, int> clients_;  // connections being served, by address
};

HttpServer::HttpServer(const std::string& listen, const std::string& what, const HttpLimits& limits)
    : limits_(limits), server_(std::make_unique<Bounded>(limits_)) {
  const HostPort at = parse_host_port(listen, what);
  httplib::Server& s = *server_;
  const int threads = limits_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  s.set_payload_max_length(limits_.body_bytes);
  s.set_keep_alive_max_count(static_cast<std::size_t>(limits_.keep_alive_requests));
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second daemon
  // binds the same port without an error and the kernel splits the clients between them.
  s.set_socket_options([](int sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (at.port == 0) {
    const int p = s.bind_to_any_port(at.host);
    if (p <= 0) throw NetworkError(what + " " + listen + ": cannot listen there (not this host's address?)");
    port_ = static_cast<std::uint16_t>(p);
  } else {
    if (!s.bind_to_port(at.host, at.port))
      throw NetworkError(what + " " + listen + ": cannot listen there (in use, or not this host's address)");
    port_ = at.port;
  }
}

httplib::Server& HttpServer::routes() { return *server_; }

bool HttpServer::client_gone() {
  if (serving_fd < 0) return false;
  pollfd p{serving_fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void HttpServer::on_refusal(std::function<void(int status)> f) { server_->refused = std::move(f); }

void HttpServer::start() {
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // Until httplib says it runs, its stop() does nothing: a server destroyed at once would
  // then listen on, and the destructor's join would never return.
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

HttpServer::~HttpServer() {
  server_->stopping = true;
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ringattn::serve
