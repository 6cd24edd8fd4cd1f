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
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "http_gate.hpp"
#include "ringattn/error.hpp"
#include "ringattn/launch.hpp"

namespace ringattn::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kSlice = std::chrono::milliseconds(100);  // how soon a wait notices the server stopping
constexpr int kBacklog = 1024;                           // bursts queue (capped by net.core.somaxconn)

// Whether an answer's head (status line and headers) gives its length: a sized answer.
// httplib writes Content-Length for a body, an empty answer and a sized content provider;
// a chunked stream or one read to the close has none.
bool sized(std::string_view head) {
  for (std::size_t at = head.find("\r\n"); at != std::string_view::npos; at = head.find("\r\n", at + 2)) {
    constexpr std::string_view kName = "content-length:";
    const std::string_view line = head.substr(at + 2, kName.size());
    if (line.size() == kName.size() &&
        std::equal(line.begin(), line.end(), kName.begin(), [](char a, char b) { return (a >= 'A' && a <= 'Z' ? a + 32 : a) == b; }))
      return true;
  }
  return false;
}

// One complete request's bytes for httplib to read (it reads nothing past them), and the
// connection to write its answer to: a sized answer whole within the write deadline from its
// first byte, a streamed one each write within it.
class BufferedStream final : public httplib::Stream {
 public:
  BufferedStream(const HttpConnection& c, const HttpLimits& l, const std::atomic<bool>& stopping) : c_(c), l_(l), stopping_(stopping) {}

  bool is_readable() const override { return at_ < c_.request; }
  bool is_writable() const override { return !failed_ && wait_writable(deadline()); }

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
    if (!wrote_) answer_by_ = Clock::now() + l_.write_deadline;
    wrote_ = true;
    const auto until = deadline();
    while (!failed_) {
      const ssize_t n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) {
        read_head(std::string_view(ptr, static_cast<std::size_t>(n)));
        return n;
      }
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
  // Until the head is whole the answer counts as sized (the head is in its deadline either way).
  Clock::time_point deadline() const { return wrote_ && !streamed_ ? answer_by_ : Clock::now() + l_.write_deadline; }

  // Finds the head's end in what was sent, and from it whether the answer is streamed.
  void read_head(std::string_view sent) {
    if (head_whole_) return;
    const std::size_t before = head_.size();
    head_.append(sent.substr(0, std::min(sent.size(), kHeadScan - std::min(kHeadScan, before))));
    const auto end = head_.find("\r\n\r\n");
    if (end == std::string::npos && head_.size() < kHeadScan) return;
    head_whole_ = true;
    streamed_ = end != std::string::npos && !sized(std::string_view(head_).substr(0, end + 2));
    std::string().swap(head_);
  }

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
  static constexpr std::size_t kHeadScan = 64 << 10;  // a head longer than this (httplib's are short) counts as sized
  std::size_t at_ = 0;
  bool wrote_ = false, failed_ = false;
  std::string head_;           // the answer's head so far
  bool head_whole_ = false, streamed_ = false;
  Clock::time_point answer_by_;  // a sized answer's deadline, from its first byte
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

class HttpServer::Bounded final : public httplib::Server, public HttpWorkers {
 public:
  Bounded(const HttpLimits& l, Descriptor&& listener)
      : l_(l), listener_(listener.get()), gate_(std::make_unique<HttpGate>(std::move(listener), l, *this, refused)) {}

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

  std::function<void(int)> refused;  // HttpServer::on_refusal (declared before gate_, which holds it)

  void start() {
    // httplib's answers look at svr_sock_ only to know whether the server is shutting down.
    svr_sock_ = listener_;
    for (int i = 0; i < l_.threads; ++i) workers_.emplace_back([this] { work(); });
    gate_thread_ = std::thread([this] { gate_->run(); });
  }

 private:
  // The gate thread: a complete request for the workers.
  void post(HttpConnection* c) override {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(c);
    }
    ready_.notify_one();
  }

  // The gate thread: a request past its queue deadline, unless a worker has taken it.
  bool withdraw(HttpConnection* c, std::string& why) override {
    std::lock_guard lock(mu_);
    const auto it = std::find(queue_.begin(), queue_.end(), c);
    if (it == queue_.end()) return false;
    queue_.erase(it);
    const int mine = busy(c->client);
    why = mine >= l_.per_client_busy ? "this address's requests hold as many workers as one address may (" + std::to_string(l_.per_client_busy) + ")"
                                     : "all " + std::to_string(l_.threads) + " workers are busy";
    return true;
  }

  int busy(const std::string& client) const {
    const auto b = busy_.find(client);
    return b == busy_.end() ? 0 : b->second;
  }

  // The request to answer next: the longest waiting one of the address with the fewest being
  // answered (a busy client's requests queue behind a probe's), of an address holding fewer
  // than per_client_busy workers. queue_.end() if none may be answered now.
  std::deque<HttpConnection*>::iterator eligible() {
    auto pick = queue_.end();
    int fewest = l_.per_client_busy;
    for (auto it = queue_.begin(); it != queue_.end() && fewest > 0; ++it) {
      if (const int n = busy((*it)->client); n < fewest) {
        fewest = n;
        pick = it;
      }
    }
    return pick;
  }

  // Null once stopping. A worker done with an address's request comes here next, so one of
  // that address's waiting requests is taken up without a notify.
  HttpConnection* next() {
    std::unique_lock lock(mu_);
    auto pick = queue_.end();
    ready_.wait(lock, [&] { return stopping_ || (pick = eligible()) != queue_.end(); });
    if (stopping_) return nullptr;
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
      if (l_.threads > 1) ready_.notify_one();  // one of this address's waiting requests may be taken up now
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
  std::deque<HttpConnection*> queue_;   // complete requests waiting for a worker (withdrawn by the gate past queue_deadline)
  std::map<std::string, int> busy_;     // requests being answered, by address (at most per_client_busy each)
  std::thread gate_thread_;
  std::vector<std::thread> workers_;
};

namespace {

// Every limit at least 1 (per_client_busy: 0 is a quarter of the threads), else the field named.
void check(HttpLimits& l, const std::string& what) {
  const auto refuse = [&](const char* field, long long value, const char* bound) {
    throw InvalidArgument(what + ": the HTTP server's " + field + " must be " + bound + " (is " + std::to_string(value) + ")");
  };
  const std::pair<const char*, long long> counts[] = {
      {"head_bytes", static_cast<long long>(std::min<std::size_t>(l.head_bytes, LLONG_MAX))},
      {"body_bytes", static_cast<long long>(std::min<std::size_t>(l.body_bytes, LLONG_MAX))},
      {"buffered_bytes", static_cast<long long>(std::min<std::size_t>(l.buffered_bytes, LLONG_MAX))},
      {"head_deadline (ms)", l.head_deadline.count()},
      {"request_deadline (ms)", l.request_deadline.count()},
      {"write_deadline (ms)", l.write_deadline.count()},
      {"idle (ms)", l.idle.count()},
      {"queue_deadline (ms)", l.queue_deadline.count()},
      {"connections", l.connections},
      {"per_client", l.per_client},
      {"threads", l.threads},
      {"keep_alive_requests", l.keep_alive_requests}};
  for (const auto& [field, value] : counts)
    if (value < 1) refuse(field, value, "at least 1");
  if (l.per_client_busy < 0) refuse("per_client_busy", l.per_client_busy, "at least 0 (0: a quarter of threads)");
  if (l.per_client_busy == 0) l.per_client_busy = std::max(1, l.threads / 4);
}

}  // namespace

HttpServer::HttpServer(const std::string& listen, const std::string& what, const HttpLimits& limits) : limits_(limits) {
  const HostPort at = parse_host_port(listen, what);
  check(limits_, what);
  Descriptor fd(listen_on(at));  // closed here until the gate holds it, and by the gate from then on
  if (fd.get() < 0) {
    throw NetworkError(what + " " + listen + (at.port == 0 ? ": cannot listen there (not this host's address?)"
                                                            : ": cannot listen there (in use, or not this host's address)"));
  }
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &n);
  int port = 0;
  socket_address(a, port);
  port_ = static_cast<std::uint16_t>(port);
  try {
    server_ = std::make_unique<Bounded>(limits_, std::move(fd));
  } catch (const std::system_error& e) {
    throw NetworkError(what + " " + listen + ": " + e.what());
  }
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
