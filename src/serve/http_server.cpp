// ringattn serve — the daemon's HTTP server (http_server.hpp): the listener, the workers that
// answer the complete requests the gate (http_gate.hpp) hands over, and the stream through
// which httplib reads such a request and writes its answer.
#include "http_server.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "http_gate.hpp"
#include "ringattn/error.hpp"
#include "ringattn/launch.hpp"

namespace ringattn::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSlice = std::chrono::milliseconds(100);  // how soon a wait notices the server stopping
constexpr int kBacklog = 1024;                           // bursts queue (capped by net.core.somaxconn)

// One complete request's bytes for httplib to read (it reads nothing past them), and the
// connection to write its answer to, each write within the write deadline.
class BufferedStream final : public httplib::Stream {
 public:
  BufferedStream(const HttpConnection& c, const HttpLimits& l, const std::atomic<bool>& stopping) : c_(c), l_(l), stopping_(stopping) {}

  bool is_readable() const override { return at_ < c_.request; }
  bool is_writable() const override { return !failed_ && wait_writable(Clock::now() + l_.write_deadline); }

  ssize_t read(char* ptr, std::size_t size) override {
    const std::size_t k = std::min(size, c_.request - at_);
    std::memcpy(ptr, c_.in.data() + at_, k);
    at_ += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* ptr, std::size_t size) override {
    // httplib answers "Expect: 100-continue" itself, after the head: the gate, which read the
    // body before handing the request over, has already said it when it was still useful.
    if (!wrote_ && c_.expects_continue && std::string_view(ptr, size).starts_with("HTTP/1.1 100 ")) {
      wrote_ = true;
      return static_cast<ssize_t>(size);
    }
    wrote_ = true;
    const auto until = Clock::now() + l_.write_deadline;
    while (!failed_) {
      const ssize_t n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !wait_writable(until)) failed_ = true;
    }
    return -1;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.client;
    port = c_.port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t n = sizeof a;
    ip = ::getsockname(c_.fd, reinterpret_cast<sockaddr*>(&a), &n) == 0 ? socket_address(a, port) : "?";
  }
  // httplib 0.11 (built with select()) answers 500 to a stream whose socket is at or past
  // FD_SETSIZE, and asks it for nothing else; this stream never select()s, and the gate holds
  // connections beyond 1024 descriptors.
  int socket() const override { return -1; }

  bool read_whole() const { return at_ == c_.request; }
  bool failed() const { return failed_; }
  bool client_gone() const {
    if (stopping_) return true;
    pollfd p{c_.fd, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

 private:
  bool wait_writable(Clock::time_point until) const {
    for (;;) {
      if (stopping_) return false;
      const auto left = until - Clock::now();
      if (left <= Clock::duration::zero()) return false;
      pollfd p{c_.fd, POLLOUT, 0};
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::min<Clock::duration>(left, kSlice)).count();
      const int r = ::poll(&p, 1, static_cast<int>(ms));
      if (r > 0) return (p.revents & (POLLERR | POLLHUP)) == 0;
      if (r < 0 && errno != EINTR) return false;
    }
  }

  const HttpConnection& c_;
  const HttpLimits& l_;
  const std::atomic<bool>& stopping_;
  std::size_t at_ = 0;
  bool wrote_ = false, failed_ = false;
};

thread_local const BufferedStream* serving = nullptr;  // the request this thread answers

// A listening socket on `at` (SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with
// which a second daemon binds the same port without an error and the kernel splits the
// clients between them). -1 if no address of `at` can be bound.
int listen_on(const HostPort& at) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(at.host.empty() ? nullptr : at.host.c_str(), std::to_string(at.port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1, no = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof no);  // "::" takes IPv4 too, as httplib did
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, kBacklog) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

}  // namespace

class HttpServer::Bounded final : public httplib::Server {
 public:
  Bounded(const HttpLimits& l, int listener)
      : l_(l), listener_(listener), gate_(std::make_unique<HttpGate>(listener, l, [this](HttpConnection* c) { post(c); }, refused)) {}

  ~Bounded() override {
    stopping_ = true;
    svr_sock_ = INVALID_SOCKET;  // httplib's content providers (streams) stop at their next call
    gate_->stop();
    if (gate_thread_.joinable()) gate_thread_.join();
    {
      std::lock_guard lock(mu_);  // a worker between its check and its wait still gets the notify
    }
    ready_.notify_all();
    for (std::thread& t : workers_) t.join();
    gate_.reset();  // closes every connection and the listener
  }

  std::function<void(int)> refused;  // HttpServer::on_refusal

  void start() {
    // httplib's answers look at svr_sock_ only to know whether the server is shutting down.
    svr_sock_ = listener_;
    for (int i = 0; i < l_.threads; ++i) workers_.emplace_back([this] { work(); });
    gate_thread_ = std::thread([this] { gate_->run(); });
  }

 private:
  // The gate thread: a complete request for the workers.
  void post(HttpConnection* c) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(c);
    }
    ready_.notify_one();
  }

  // The next request to answer: the longest waiting one of the address with the fewest being
  // answered (a busy client's requests queue behind a probe's). Null once stopping.
  HttpConnection* next() {
    std::unique_lock lock(mu_);
    ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return nullptr;
    auto pick = queue_.begin();
    int fewest = INT_MAX;
    for (auto it = queue_.begin(); it != queue_.end() && fewest > 0; ++it) {
      const auto b = busy_.find((*it)->client);
      const int n = b == busy_.end() ? 0 : b->second;
      if (n < fewest) {
        fewest = n;
        pick = it;
      }
    }
    HttpConnection* c = *pick;
    queue_.erase(pick);
    ++busy_[c->client];
    return c;
  }

  void work() {
    while (HttpConnection* c = next()) {
      const bool keep = answer(*c);
      {
        std::lock_guard lock(mu_);
        if (const auto b = busy_.find(c->client); b != busy_.end() && --b->second <= 0) busy_.erase(b);
      }
      gate_->give_back(c, keep);  // the gate may close and free it from here on
    }
  }

  // httplib answers the request at the front of c.in; whether the connection may serve another.
  bool answer(HttpConnection& c) {
    BufferedStream s(c, l_, stopping_);
    const bool last = ++c.served >= l_.keep_alive_requests || stopping_;
    bool closed = false, ok = false;
    serving = &s;
    try {
      ok = process_request(s, last, closed, nullptr);
    } catch (...) {  // httplib catches a handler's exceptions; anything else ends the connection
      ok = false;
    }
    serving = nullptr;
    c.in = c.in.substr(c.request);  // a kept connection holds what follows its request, no more
    // An answer given before httplib read the whole body: the rest must not be taken for the
    // next request.
    return ok && !closed && !last && s.read_whole() && !s.failed();
  }

  const HttpLimits& l_;
  int listener_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<HttpGate> gate_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<HttpConnection*> queue_;   // complete requests waiting for a worker
  std::map<std::string, int> busy_;     // requests being answered, by address
  std::thread gate_thread_;
  std::vector<std::thread> workers_;
};

HttpServer::HttpServer(const std::string& listen, const std::string& what, const HttpLimits& limits) : limits_(limits) {
  const HostPort at = parse_host_port(listen, what);
  if (limits_.threads < 1 || limits_.connections < 1 || limits_.per_client < 1 || limits_.keep_alive_requests < 1)
    throw InvalidArgument(what + ": the HTTP server's threads, connections, per_client and keep_alive_requests must be at least 1");
  const int fd = listen_on(at);
  if (fd < 0) {
    throw NetworkError(what + " " + listen + (at.port == 0 ? ": cannot listen there (not this host's address?)"
                                                            : ": cannot listen there (in use, or not this host's address)"));
  }
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  int port = 0;
  socket_address(a, port);
  port_ = static_cast<std::uint16_t>(port);
  server_ = std::make_unique<Bounded>(limits_, fd);  // owns fd from here
  server_->set_payload_max_length(limits_.body_bytes);
  // What httplib's Keep-Alive header promises.
  server_->set_keep_alive_max_count(static_cast<std::size_t>(limits_.keep_alive_requests));
  server_->set_keep_alive_timeout(std::max<time_t>(1, std::chrono::duration_cast<std::chrono::seconds>(limits_.idle).count()));
}

HttpServer::~HttpServer() = default;

httplib::Server& HttpServer::routes() { return *server_; }

bool HttpServer::client_gone() { return serving != nullptr && serving->client_gone(); }

void HttpServer::on_refusal(std::function<void(int status)> f) { server_->refused = std::move(f); }

void HttpServer::start() { server_->start(); }

}  // namespace ringattn::serve
