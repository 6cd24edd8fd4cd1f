// The daemon's HTTP server (src/serve/http_server.hpp: cpp-httplib behind our own gate) from
// a plain socket client on loopback: answers and keep-alive, and each bound an untrusted
// client cannot get past — the head's size (one long line or a flood of short ones), the
// body's size however framed (chunked too: 413, malformed framing 400), one deadline for the
// whole request (slowloris), a response before the body closes the connection (no smuggled
// request), connections per client address (127.0.0.2 is served while 127.0.0.1 hoards).
// And what the gate is for: 64 connections dribbling header bytes from 4 addresses, or 64
// idle kept-alive ones, hold no worker (a fifth address is answered while all of them are
// still open), a burst of 256 connections is answered whole (none reset), and streams and
// client_gone() work through the workers. The audit's reproductions. And the review's: one
// address holds a share of the buffered bytes and of the workers (the others are served),
// a request waits for a worker within a deadline, every answer is followed by a lingering
// close (no reset discards it), a sized answer is written whole within the write deadline
// (a stream is not), the listener is closed when the server cannot start, every limit is
// checked. Every socket and thread a case starts is closed and joined however the case ends
// (Socket, Background).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ringattn/error.hpp"
#include "src/serve/http_server.hpp"
#include "tests/free_port.hpp"
#include "tests/skip.hpp"

using ringattn::serve::HttpLimits;
using ringattn::serve::HttpServer;
using Clock = std::chrono::steady_clock;

namespace {

// A server with the routes the cases use; `smuggled` counts requests to /smuggled, `refused`
// the server's own answers by status, `saw_gone` handlers that found their client gone,
// `held` handlers of /hold waiting for `release`.
struct Served {
  std::atomic<int> smuggled{0}, saw_gone{0}, held{0};
  std::atomic<bool> release{false};
  std::array<std::atomic<int>, 600> refused{};
  static constexpr std::size_t kBig = 64 << 20;  // /big: far more than the sockets' buffers hold
  HttpServer server;
  explicit Served(const HttpLimits& l = small_limits(), const std::string& listen = "127.0.0.1:0") : server(listen, "--test", l) {
    httplib::Server& s = server.routes();
    s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      if (req.path != "/locked") return httplib::Server::HandlerResponse::Unhandled;
      res.status = 401;  // answered before the body is read
      res.set_content("no\n", "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    });
    s.Get("/metrics", [](const httplib::Request&, httplib::Response& res) { res.set_content("up 1\n", "text/plain; version=0.0.4"); });
    s.Get("/throw", [](const httplib::Request&, httplib::Response&) { throw std::runtime_error("boom"); });
    s.Get("/smuggled", [this](const httplib::Request&, httplib::Response& res) {
      ++smuggled;
      res.set_content("smuggled\n", "text/plain");
    });
    s.Post("/echo", [](const httplib::Request& req, httplib::Response& res) { res.set_content(std::to_string(req.body.size()), "text/plain"); });
    s.Get("/big", [](const httplib::Request&, httplib::Response& res) { res.set_content(std::string(kBig, 'x'), "text/plain"); });
    s.Post("/mirror", [](const httplib::Request& req, httplib::Response& res) { res.set_content(req.body, "application/octet-stream"); });
    // A stream of ticks until the client leaves (as the endpoint's SSE replies are written).
    s.Get("/ticks", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/event-stream", [](std::size_t, httplib::DataSink& sink) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return sink.write("tick\n", 5);
      });
    });
    // A reply that waits for the ring, polling client_gone() meanwhile (as the endpoint does).
    s.Get("/wait", [this](const httplib::Request&, httplib::Response& res) {
      for (int i = 0; i < 1000 && !HttpServer::client_gone(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (HttpServer::client_gone()) ++saw_gone;
      res.set_content("done\n", "text/plain");
    });
    // Holds its worker until released (or its client is gone, or the server stops), then
    // answers ?n= bytes (5 without).
    s.Get("/hold", [this](const httplib::Request& req, httplib::Response& res) {
      ++held;
      for (int i = 0; i < 6000 && !release && !HttpServer::client_gone(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      --held;
      res.set_content(req.has_param("n") ? std::string(std::stoul(req.get_param_value("n")), 'h') : std::string("held\n"), "text/plain");
    });
    server.on_refusal([this](int status) { ++refused.at(static_cast<std::size_t>(status)); });
    server.start();
  }
  static HttpLimits small_limits() {
    HttpLimits l;
    l.head_bytes = 8 << 10;
    l.body_bytes = 64 << 10;
    l.request_deadline = std::chrono::milliseconds(1500);
    l.idle = std::chrono::milliseconds(1500);
    l.threads = 6;
    l.per_client = 3;
    return l;
  }
  int port() const { return server.port(); }
};

// A client socket from `from` (any address of 127/8 is loopback on Linux), connected; with
// `blocking` false the connect is under way (EINPROGRESS) when it returns; `rcvbuf` > 0 a
// receive buffer that small (set before the connect, so the window is too).
int dial(int port, const char* from = "127.0.0.1", bool blocking = true, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | (blocking ? 0 : SOCK_NONBLOCK), 0);
  REQUIRE(fd >= 0);
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &src.sin_addr);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0;  // the client's own address
  const bool connected = bound && (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 || (!blocking && errno == EINPROGRESS));
  if (!connected) ::close(fd);
  REQUIRE(bound);
  REQUIRE(connected);
  return fd;
}

// Closes its socket however the case ends.
struct Socket {
  int fd = -1;
  explicit Socket(int f) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Socket& operator=(Socket&&) = delete;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

// A thread told to stop and joined however the case ends.
struct Background {
  std::atomic<bool> stop{false};
  std::thread thread;
  explicit Background(std::function<void(const std::atomic<bool>&)> f) : thread([this, f = std::move(f)] { f(stop); }) {}
  ~Background() {
    stop = true;
    thread.join();
  }
};

// Whether the server has neither answered nor closed `fd` yet (nothing to read, no hang-up).
bool still_open(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 0;
}

// The four addresses the crowds of the cases below come from, 127.0.0.1 left for the client
// that must be served.
const char* crowd_address(int i) {
  static const char* kFrom[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"};
  return kFrom[i % 4];
}

bool send_all(int fd, const std::string& s) {
  for (std::size_t off = 0; off < s.size();) {
    const auto n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

// What arrives until the peer closes; `closed` false if `timeout` passed first.
std::string read_until_closed(int fd, std::chrono::milliseconds timeout, bool& closed) {
  std::string out;
  const auto end = Clock::now() + timeout;
  closed = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return out;
    char buf[4096];
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      return out;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

int status_of(const std::string& text) { return text.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(text.substr(9, 3)) : 0; }

// One answer with a Content-Length on a connection that stays open: its text, or what came
// before `timeout` or the close.
std::string read_answer(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto end = Clock::now() + timeout;
  for (;;) {
    if (const auto head = out.find("\r\n\r\n"); head != std::string::npos) {
      const auto at = out.find("Content-Length: ");
      if (at != std::string::npos && at < head && out.size() >= head + 4 + std::stoul(out.substr(at + 16))) return out;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return out;
    char buf[4096];
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

std::string body_of(const std::string& text) {
  const auto at = text.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : text.substr(at + 4);
}

// One request on its own connection that asks to close: the whole reply.
std::string exchange(int port, const std::string& request, const char* from = "127.0.0.1",
                     std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const Socket c(dial(port, from));
  send_all(c.fd, request);
  bool closed = false;
  return read_until_closed(c.fd, timeout, closed);
}

std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"; }

// Waits until `done` holds; false if `guard` (a hang guard) passed first.
bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds guard = std::chrono::seconds(20)) {
  for (const auto end = Clock::now() + guard; !done();) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Everything until the end: `error` the errno that ended it instead of a clean close
// (ECONNRESET: the server reset the connection), ETIMEDOUT if `timeout` passed first.
std::string read_to_end(int fd, std::chrono::milliseconds timeout, int& error) {
  std::string out;
  const auto end = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
      error = ETIMEDOUT;
      return out;
    }
    char buf[65536];
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      error = n == 0 ? 0 : errno;
      return out;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

// Once the server has answered and ended its side: whether it still takes what the client
// sends for a moment (a lingering close) instead of resetting the connection, which a closed
// socket does to the first bytes that reach it (the next send fails, SO_ERROR is set).
bool takes_more(int fd) {
  for (int i = 0; i < 4; ++i) {
    if (::send(fd, "x", 1, MSG_NOSIGNAL) != 1) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int error = 0;
  socklen_t n = sizeof error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &n);
  return error == 0;
}

}  // namespace

TEST_CASE("http server: answers with the handler's status, type and body; keep-alive; a throwing handler is a 500") {
  Served s;
  std::string r = exchange(s.port(), get("/metrics?x=1"));
  CHECK(status_of(r) == 200);
  CHECK(r.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(r.substr(r.find("\r\n\r\n") + 4) == "up 1\n");
  CHECK(status_of(exchange(s.port(), get("/nope"))) == 404);
  CHECK(status_of(exchange(s.port(), get("/throw"))) == 500);
  CHECK(status_of(exchange(s.port(), get("/metrics"))) == 200);
  // Two requests on one connection, then it stays open for a third.
  const int fd = dial(s.port());
  send_all(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  bool closed = false;
  r = read_until_closed(fd, std::chrono::milliseconds(500), closed);
  CHECK_FALSE(closed);
  CHECK(r.find("up 1\n") != r.rfind("up 1\n"));  // two answers
  ::close(fd);
  for (const char* bad : {"GET /metrics\r\n\r\n", "\x01\x02 / HTTP/1.1\r\n\r\n"}) CHECK(status_of(exchange(s.port(), bad)) == 400);
}

TEST_CASE("http server: the head is bounded — one long line or a flood of short ones is 431, and memory stays bounded") {
  Served s;
  std::string r = exchange(s.port(), "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(9 << 10, 'a') + "\r\n\r\n");
  CHECK(status_of(r) == 431);
  // A flood: header lines without end, as fast as the socket takes them. The server cuts it
  // at 8 KiB; the client sees the 431 and the close long before it could send 100 MiB.
  const int fd = dial(s.port());
  send_all(fd, "GET /metrics HTTP/1.1\r\n");
  const std::string line = "X-A: " + std::string(100, 'b') + "\r\n";
  std::size_t sent = 0;
  while (sent < (100u << 20) && send_all(fd, line)) sent += line.size();
  bool closed = false;
  r = read_until_closed(fd, std::chrono::seconds(5), closed);
  ::close(fd);
  CHECK(sent < (100u << 20));  // the server closed: sending failed
  CHECK(status_of(r) == 431);
  CHECK(status_of(exchange(s.port(), get("/metrics"))) == 200);
}

TEST_CASE("http server: a body by Content-Length — over the bound 413 at once, unread; Expect: 100-continue; a response before the body closes the connection") {
  Served s;  // body_bytes 64 KiB
  std::string r = exchange(s.port(), "POST /echo HTTP/1.1\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n");
  CHECK(status_of(r) == 413);
  CHECK(r.find(R"("code":"request_too_large")") != std::string::npos);
  CHECK(s.refused[413] == 1);  // the gate's answer, counted
  r = exchange(s.port(), "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
  CHECK(body_of(r) == "5");
  // A client that waits for leave to send its body gets it (once) before the body is read.
  {
    const Socket c(dial(s.port()));
    send_all(c.fd, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    std::string interim;
    for (const auto end = Clock::now() + std::chrono::seconds(10); interim.find("\r\n\r\n") == std::string::npos && Clock::now() < end;) {
      pollfd p{c.fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      const auto n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      interim.append(buf, static_cast<std::size_t>(n));
    }
    CHECK(interim == "HTTP/1.1 100 Continue\r\n\r\n");
    send_all(c.fd, "hello");
    r = read_answer(c.fd, std::chrono::seconds(10));
    CHECK(status_of(r) == 200);
    CHECK(body_of(r) == "5");
    CHECK(r.find("100 Continue") == std::string::npos);  // httplib's own is not sent again
  }
  // A refusal before the body: the body (here a whole second request) is not served.
  const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  r = exchange(s.port(), "POST /locked HTTP/1.1\r\nContent-Length: " + std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled);
  CHECK(status_of(r) == 401);
  CHECK(r.find("smuggled") == std::string::npos);
  CHECK(s.smuggled == 0);
}

TEST_CASE("http server: a chunked body — within the bound it reaches the handler whole; past it 413 as the sizes pass it; malformed framing 400") {
  Served s;  // body_bytes 64 KiB
  // Within the bound: chunks of odd sizes, one with an extension, every byte value, and a
  // second request pipelined behind it.
  std::string body;
  for (int i = 0; i < 60000; ++i) body += static_cast<char>(i * 7 % 251);
  std::string framed;
  const auto hex = [](std::size_t n) {
    char t[32];
    std::snprintf(t, sizeof t, "%zx", n);
    return std::string(t);
  };
  std::size_t at = 0;
  for (const std::size_t n : {std::size_t{1}, std::size_t{0x1000}, std::size_t{30000}, body.size() - 1 - 0x1000 - 30000}) {
    framed += hex(n) + (n == 0x1000 ? ";name=value" : "") + "\r\n" + body.substr(at, n) + "\r\n";
    at += n;
  }
  framed += "0\r\n\r\n";
  {
    const Socket c(dial(s.port()));
    send_all(c.fd, "POST /mirror HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + framed + get("/metrics"));
    bool closed = false;
    const std::string both = read_until_closed(c.fd, std::chrono::seconds(10), closed);
    const std::size_t head = both.find("\r\n\r\n") + 4;
    const std::size_t length = std::stoul(both.substr(both.find("Content-Length: ") + 16));
    CHECK(status_of(both) == 200);
    CHECK(both.substr(head, length) == body);
    CHECK(body_of(both.substr(head + length)) == "up 1\n");
  }
  // Past the bound in one size line: refused before any of its data is sent.
  std::string r = exchange(s.port(), "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10001\r\n");
  CHECK(status_of(r) == 413);
  CHECK(r.find(R"("code":"request_too_large")") != std::string::npos);
  // Past the bound over many chunks, sent as fast as the socket takes them: cut at the
  // bound, never read whole, and the client reads the 413 (not a reset).
  {
    const Socket c(dial(s.port()));
    send_all(c.fd, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = "1000\r\n" + std::string(0x1000, 'c') + "\r\n";
    std::size_t sent = 0;
    while (sent < (64u << 20) && send_all(c.fd, chunk)) sent += chunk.size();
    bool closed = false;
    r = read_until_closed(c.fd, std::chrono::seconds(5), closed);
    CHECK(sent < (64u << 20));
    CHECK(status_of(r) == 413);
    CHECK(r.find(R"("code":"request_too_large")") != std::string::npos);
  }
  CHECK(s.refused[413] == 2);
  // Malformed framing, and framing httplib could read otherwise than a proxy in front: 400.
  const char* bad_chunks[] = {"zz\r\n", "-1\r\n", " 5\r\nhello\r\n0\r\n\r\n", "0x5\r\nhello\r\n0\r\n\r\n", "5\r\nhelloXX",
                              "5\nhello\r\n0\r\n\r\n", "00000000000000001\r\nx\r\n0\r\n\r\n", "0\r\nX-Trailer: 1\r\n\r\n"};
  for (const char* bad : bad_chunks) {
    CAPTURE(bad);
    r = exchange(s.port(), std::string("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") + bad);
    CHECK(status_of(r) == 400);
    CHECK(r.find(R"("code":"malformed_request")") != std::string::npos);
  }
  const char* bad_heads[] = {"Transfer-Encoding: chunked\r\nContent-Length: 5", "Content-Length: 5\r\nContent-Length: 5",
                             "Content-Length: 5x", "Content-Length: %35", "Transfer-Encoding: gzip, chunked", "Content-Length : 5",
                             "X-A: a\nContent-Length: 5"};
  for (const char* bad : bad_heads) {
    CAPTURE(bad);
    CHECK(status_of(exchange(s.port(), std::string("POST /echo HTTP/1.1\r\n") + bad + "\r\n\r\nhello\r\n0\r\n\r\n")) == 400);
  }
  CHECK(s.refused[400] == static_cast<int>(std::size(bad_chunks) + std::size(bad_heads)));
}

// Sends `request` a byte every 50 ms until the server answers or closes; how many were sent.
std::size_t dribble(int fd, const std::string& request) {
  std::size_t sent = 0;
  for (; sent < request.size(); ++sent) {  // each byte well within any per-read timeout
    if (!send_all(fd, request.substr(sent, 1))) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) break;  // the server answered or closed
  }
  return sent;
}

TEST_CASE("http server: one deadline for the whole request, a shorter one for its head — a client sending a byte at a time is cut with a 408 (slowloris)") {
  Served s;  // 1.5 s per request
  const auto t0 = Clock::now();
  {  // the head, a byte at a time: 11 s of it
    const Socket c(dial(s.port()));
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + std::string(200, 's') + "\r\n\r\n";
    const std::size_t sent = dribble(c.fd, request);
    bool closed = false;
    const std::string r = read_until_closed(c.fd, std::chrono::seconds(3), closed);
    CHECK(closed);
    CHECK(sent < request.size());  // cut before the client finished
    CHECK(status_of(r) == 408);
    CHECK(r.find(R"("code":"request_timeout")") != std::string::npos);
    CHECK(takes_more(c.fd));  // a lingering close: a client still sending is not reset
  }
  {  // a head on time, then its body a byte at a time
    const Socket c(dial(s.port()));
    send_all(c.fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 400\r\n\r\n");
    const std::size_t sent = dribble(c.fd, std::string(400, 'b'));
    bool closed = false;
    const std::string r = read_until_closed(c.fd, std::chrono::seconds(3), closed);
    CHECK(closed);
    CHECK(sent < 400);
    CHECK(status_of(r) == 408);
    CHECK(r.find("the request's body did not arrive within 1500 ms") != std::string::npos);
    CHECK(takes_more(c.fd));
  }
  CHECK(s.refused[408] == 2);
  CHECK(Clock::now() - t0 < std::chrono::seconds(16));  // hang guard
  // The head has a deadline of its own, shorter than the request's.
  HttpLimits l = Served::small_limits();
  l.head_deadline = std::chrono::milliseconds(300);
  l.request_deadline = std::chrono::seconds(60);
  Served quick(l);
  const Socket c(dial(quick.port()));
  send_all(c.fd, "GET /metr");
  bool closed = false;
  const std::string r = read_until_closed(c.fd, std::chrono::seconds(30), closed);
  CHECK(closed);
  CHECK(r.find("the request's head did not arrive within 300 ms") != std::string::npos);
}

TEST_CASE("http server: an answer has a write deadline — a client that does not read frees its worker") {
  HttpLimits l = Served::small_limits();
  l.threads = 1;
  l.write_deadline = std::chrono::milliseconds(200);
  Served s(l);
  const Socket stalled(dial(s.port()));
  send_all(stalled.fd, get("/big"));  // and reads nothing for now
  // The one worker is free again once a write to the stalled client has waited 200 ms.
  CHECK(status_of(exchange(s.port(), get("/metrics"), "127.0.0.2", std::chrono::seconds(30))) == 200);
  bool closed = false;
  const std::string r = read_until_closed(stalled.fd, std::chrono::seconds(30), closed);
  CHECK(closed);
  CHECK(r.size() < Served::kBig);  // cut, not delivered
}

TEST_CASE("http server: one client address holds a few connections at most; another address is still served") {
  Served s;  // 6 threads, 3 per client
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(dial(s.port()));
    send_all(held.back(), "GET /metr");  // half a head: each holds a thread
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  {
    const Socket c(dial(s.port()));
    send_all(c.fd, get("/metrics"));  // unread when the server refuses: a plain close would reset
    bool closed = false;
    const std::string refused = read_until_closed(c.fd, std::chrono::seconds(5), closed);
    CHECK(closed);
    CHECK(status_of(refused) == 503);
    CHECK(refused.find("too_many_connections") != std::string::npos);
    CHECK(takes_more(c.fd));  // refused at the door, it still lingers
  }
  CHECK(status_of(exchange(s.port(), get("/metrics"), "127.0.0.2")) == 200);  // someone else: served at once
  for (const int fd : held) ::close(fd);
  int status = 0;  // the server learns of the closes when it next reads them: retry briefly
  for (int attempt = 0; attempt < 40 && status != 200; ++attempt) {
    if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = status_of(exchange(s.port(), get("/metrics")));
  }
  CHECK(status == 200);
}

// The crowds below come from 4 addresses, 64 connections in all, against 6 workers: before
// the gate, each held a connection thread, and the client from 127.0.0.1 waited for one.
HttpLimits crowd_limits() {
  HttpLimits l = Served::small_limits();  // 6 workers
  l.per_client = 64;
  l.head_deadline = l.request_deadline = l.idle = std::chrono::seconds(60);  // none is cut while a case runs
  return l;
}

TEST_CASE("http server: 64 connections dribbling a header byte now and then from 4 addresses hold no worker (slowloris)") {
  Served s(crowd_limits());
  std::vector<Socket> drippers;
  for (int i = 0; i < 64; ++i) {
    drippers.emplace_back(dial(s.port(), crowd_address(i)));
    CHECK(send_all(drippers.back().fd, "GET /metrics HTTP/1.1\r\nX-Drip: "));
  }
  std::atomic<int> rounds{0};
  Background drip([&](const std::atomic<bool>& stop) {
    while (!stop) {
      for (const Socket& d : drippers) send_all(d.fd, "d");
      ++rounds;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  while (rounds < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Answered while every dripper still holds its connection (none answered, none cut): the
  // answer did not wait for a dripper to go. The 30 s is a hang guard, half their deadline.
  const std::string r = exchange(s.port(), get("/metrics"), "127.0.0.1", std::chrono::seconds(30));
  CHECK(status_of(r) == 200);
  int open = 0;
  for (const Socket& d : drippers) open += still_open(d.fd);
  CHECK(open == 64);
}

TEST_CASE("http server: 64 idle kept-alive connections hold no worker; a new client is served while all stay open") {
  Served s(crowd_limits());
  std::vector<Socket> idle;
  for (int i = 0; i < 64; ++i) {
    idle.emplace_back(dial(s.port(), crowd_address(i)));
    send_all(idle.back().fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  const auto guard = Clock::now() + std::chrono::seconds(30);  // a hang guard for all of them
  const auto left = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(guard - Clock::now()); };
  int answered = 0;
  for (const Socket& c : idle) answered += status_of(read_answer(c.fd, left())) == 200;
  CHECK(answered == 64);  // each kept its connection, idle now
  CHECK(status_of(exchange(s.port(), get("/metrics"), "127.0.0.1", left())) == 200);
  int open = 0;
  for (const Socket& c : idle) open += still_open(c.fd);
  CHECK(open == 64);
  // Still theirs: a second request on each is answered on the same connection.
  answered = 0;
  for (const Socket& c : idle) send_all(c.fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  for (const Socket& c : idle) answered += status_of(read_answer(c.fd, left())) == 200;
  CHECK(answered == 64);
}

TEST_CASE("http server: a burst of 256 connections opened at once from 4 addresses is answered whole, none reset") {
  Served s(crowd_limits());
  constexpr int kBurst = 256;
  std::vector<Socket> burst;
  for (int i = 0; i < kBurst; ++i) burst.emplace_back(dial(s.port(), crowd_address(i), false));  // all connecting at once
  enum class At { connecting, sent, done };
  std::vector<At> at(kBurst, At::connecting);
  std::vector<std::string> text(kBurst);
  std::vector<int> failed(kBurst, 0);  // errno of a connection that failed (ECONNRESET, ...)
  const std::string request = get("/metrics");
  for (const auto guard = Clock::now() + std::chrono::seconds(60); Clock::now() < guard;) {  // a hang guard
    std::vector<pollfd> wait;
    std::vector<int> which;
    for (int i = 0; i < kBurst; ++i) {
      if (at[i] == At::done) continue;
      wait.push_back({burst[i].fd, static_cast<short>(at[i] == At::connecting ? POLLOUT : POLLIN), 0});
      which.push_back(i);
    }
    if (wait.empty()) break;
    if (::poll(wait.data(), wait.size(), 100) <= 0) continue;
    for (std::size_t k = 0; k < wait.size(); ++k) {
      if (wait[k].revents == 0) continue;
      const int i = which[k];
      if (at[i] == At::connecting) {
        int error = 0;
        socklen_t n = sizeof error;
        ::getsockopt(burst[i].fd, SOL_SOCKET, SO_ERROR, &error, &n);
        if (error == 0 && !send_all(burst[i].fd, request)) error = errno;
        failed[i] = error;
        at[i] = error ? At::done : At::sent;
        continue;
      }
      char buf[4096];
      const auto n = ::recv(burst[i].fd, buf, sizeof buf, 0);
      if (n > 0) {
        text[i].append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        failed[i] = n == 0 ? 0 : errno;
        at[i] = At::done;
      }
    }
  }
  int answered = 0, reset = 0;
  for (int i = 0; i < kBurst; ++i) {
    answered += status_of(text[i]) == 200 && body_of(text[i]) == "up 1\n";
    reset += failed[i] != 0;
  }
  CHECK(reset == 0);
  CHECK(answered == kBurst);
}

TEST_CASE("http server: the requests being read hold a bounded number of bytes together; past it 503, the others unharmed") {
  HttpLimits l = crowd_limits();
  l.buffered_bytes = 150 << 10;  // two bodies of 64 KiB fit, a third does not
  Served s(l);
  const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n";
  const std::string most(60 << 10, 'b'), rest((64 << 10) - most.size(), 'b');
  std::vector<Socket> uploads;
  for (int i = 0; i < 3; ++i) {
    uploads.emplace_back(dial(s.port(), crowd_address(i)));
    send_all(uploads.back().fd, head + most);
  }
  // Whichever the gate read last is refused, whatever the order; the other two complete.
  int busy = 0, answered = 0;
  for (const Socket& u : uploads) {
    send_all(u.fd, rest);
    const std::string a = read_answer(u.fd, std::chrono::seconds(10));
    busy += status_of(a) == 503 && a.find(R"("code":"server_busy")") != std::string::npos;
    answered += status_of(a) == 200 && body_of(a) == "65536";
  }
  CHECK(busy == 1);
  CHECK(answered == 2);
  CHECK(s.refused[503] == 1);
}

TEST_CASE("http server: one address's requests being read hold a quarter of the buffered bytes at most; past it that address is refused, another is served") {
  HttpLimits l = crowd_limits();
  l.buffered_bytes = 512 << 10;  // an address's share: 128 KiB, two of the uploads below and not a third
  Served s(l);
  // 8 uploads from one address, each 60 KiB of a 64 KiB body: 480 KiB, most of the whole.
  const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n";
  std::vector<Socket> hog;
  for (int i = 0; i < 8; ++i) {
    hog.emplace_back(dial(s.port(), "127.0.0.2"));
    CHECK(send_all(hog.back().fd, head + std::string(60 << 10, 'b')));
  }
  // Whatever order the gate read them in, two fill the share and the six others pass it.
  CHECK(wait_for([&] { return s.refused[503] >= 6; }));
  int refused = 0, open = 0;
  for (const Socket& u : hog) {
    if (still_open(u.fd)) {
      ++open;
      continue;
    }
    const std::string a = read_answer(u.fd, std::chrono::seconds(10));
    refused += status_of(a) == 503 && a.find(R"("code":"server_busy")") != std::string::npos &&
               a.find("this address's requests being read or waiting for a worker hold its share of 128 KiB") != std::string::npos;
  }
  CHECK(refused == 6);
  CHECK(open == 2);
  // Another address sends a whole body while the hog's two still wait for theirs: answered
  // (the hog's 480 KiB and this 64 KiB would have passed the 512 KiB of all).
  const std::string r = exchange(s.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\nConnection: close\r\n\r\n" +
                                               std::string(64 << 10, 'c'));
  CHECK(status_of(r) == 200);
  CHECK(body_of(r) == "65536");
  CHECK(s.refused[503] == 6);
}

TEST_CASE("http server: one address holds per_client_busy workers at most; its further requests wait while another address is served") {
  HttpLimits l = crowd_limits();
  l.threads = 4;
  l.per_client_busy = 2;
  l.queue_deadline = std::chrono::seconds(60);  // none is refused while the case runs
  Served s(l);
  std::vector<Socket> hog;
  for (int i = 0; i < 4; ++i) {
    hog.emplace_back(dial(s.port(), "127.0.0.2"));
    send_all(hog.back().fd, get("/hold"));
  }
  CHECK(wait_for([&] { return s.held == 2; }));
  // The hog's two others are complete and waiting; two workers are free, and this takes one.
  const std::string r = exchange(s.port(), get("/metrics"), "127.0.0.1", std::chrono::seconds(20));
  CHECK(status_of(r) == 200);
  CHECK(s.held == 2);  // the hog's others were not given the idle workers
  s.release = true;    // then all four are answered, two at a time
  int answered = 0;
  for (const Socket& h : hog) {
    bool closed = false;
    answered += body_of(read_until_closed(h.fd, std::chrono::seconds(20), closed)) == "held\n";
  }
  CHECK(answered == 4);
  CHECK(s.refused[503] == 0);
  // The default is a quarter of the threads, at least 1; the endpoint's 64 give 16.
  HttpLimits many;
  many.threads = 64;
  CHECK(HttpServer("127.0.0.1:0", "--test", many).limits().per_client_busy == 16);
  many.threads = 3;
  CHECK(HttpServer("127.0.0.1:0", "--test", many).limits().per_client_busy == 1);
}

TEST_CASE("http server: a request waits for a worker within queue_deadline, then 503 server_busy naming why") {
  HttpLimits l = crowd_limits();
  l.threads = 2;
  l.per_client_busy = 1;
  l.queue_deadline = std::chrono::milliseconds(300);
  Served s(l);
  const Socket first(dial(s.port(), "127.0.0.2"));
  send_all(first.fd, get("/hold"));
  REQUIRE(wait_for([&] { return s.held == 1; }));
  {  // the same address: its one worker is held, so this waits although a worker is free
    const Socket second(dial(s.port(), "127.0.0.2"));
    send_all(second.fd, get("/hold"));
    bool closed = false;
    const std::string r = read_until_closed(second.fd, std::chrono::seconds(20), closed);
    CHECK(closed);
    CHECK(status_of(r) == 503);
    CHECK(r.find(R"("code":"server_busy")") != std::string::npos);
    CHECK(r.find("this request waited 300 ms for a worker: this address's requests hold as many workers as one address may (1)") !=
          std::string::npos);
    CHECK(s.held == 1);  // it never reached a handler
  }
  const Socket third(dial(s.port(), "127.0.0.3"));  // another address takes the second worker
  send_all(third.fd, get("/hold"));
  REQUIRE(wait_for([&] { return s.held == 2; }));
  {  // a third address: every worker is busy
    const Socket fourth(dial(s.port(), "127.0.0.4"));
    send_all(fourth.fd, get("/metrics"));
    bool closed = false;
    const std::string r = read_until_closed(fourth.fd, std::chrono::seconds(20), closed);
    CHECK(status_of(r) == 503);
    CHECK(r.find("this request waited 300 ms for a worker: all 2 workers are busy") != std::string::npos);
  }
  CHECK(s.refused[503] == 2);
  s.release = true;
  for (const Socket* h : {&first, &third}) {
    bool closed = false;
    CHECK(body_of(read_until_closed(h->fd, std::chrono::seconds(20), closed)) == "held\n");
  }
}

TEST_CASE("http server: the last answer of a connection with more sent behind it is not lost to a reset (a lingering close)") {
  Served s;
  // A small receive window: most of the 1 MiB answer is still in the server's socket when
  // the worker is done with it. Closing a socket with unread bytes resets the connection,
  // and a reset discards what the socket had not sent yet.
  const Socket c(dial(s.port(), "127.0.0.1", true, 8 << 10));
  send_all(c.fd, "GET /hold?n=1048576 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  REQUIRE(wait_for([&] { return s.held == 1; }));  // handed to a worker: the gate reads no more of it meanwhile
  send_all(c.fd, get("/metrics"));                 // pipelined, unread when the answer is done
  s.release = true;
  pollfd p{c.fd, 0, 0};  // a reset, or a second for the server to have closed or to linger
  ::poll(&p, 1, 1000);
  int error = -1;
  const std::string r = read_to_end(c.fd, std::chrono::seconds(20), error);
  CHECK(error == 0);  // the server's end, not a reset
  CHECK(status_of(r) == 200);
  CHECK(body_of(r).size() == (1u << 20));  // all of it
  CHECK(body_of(r).find_first_not_of('h') == std::string::npos);
  // The same at the keep-alive limit: the 1st answer is the last.
  HttpLimits one = Served::small_limits();
  one.keep_alive_requests = 1;
  Served t(one);
  const Socket d(dial(t.port(), "127.0.0.1", true, 8 << 10));
  send_all(d.fd, "GET /hold?n=1048576 HTTP/1.1\r\nHost: x\r\n\r\n");
  REQUIRE(wait_for([&] { return t.held == 1; }));
  send_all(d.fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  t.release = true;
  pollfd e{d.fd, 0, 0};
  ::poll(&e, 1, 1000);
  const std::string q = read_to_end(d.fd, std::chrono::seconds(20), error);
  CHECK(error == 0);
  CHECK(q.find("Connection: close") != std::string::npos);
  CHECK(body_of(q).size() == (1u << 20));
}

TEST_CASE("http server: a sized answer is written whole within write_deadline — a client draining a little at a time frees its worker; a stream is not cut") {
  HttpLimits l = Served::small_limits();
  l.threads = 1;
  l.write_deadline = std::chrono::seconds(2);
  Served s(l);
  {  // 64 MiB read 64 KiB every 10 ms: every single write waits far less than 2 s, all of it takes 10 s at least
    const Socket slow(dial(s.port(), "127.0.0.1", true, 64 << 10));
    send_all(slow.fd, get("/big"));
    std::size_t got = 0;
    bool closed = false;
    for (const auto guard = Clock::now() + std::chrono::seconds(60); !closed && Clock::now() < guard;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      char buf[64 << 10];
      const auto n = ::recv(slow.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) got += static_cast<std::size_t>(n);
      closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
    CHECK(closed);
    CHECK(got < Served::kBig);  // cut, not delivered
    // The one worker is free: another client is answered.
    CHECK(status_of(exchange(s.port(), get("/metrics"), "127.0.0.2", std::chrono::seconds(20))) == 200);
  }
  l.write_deadline = std::chrono::milliseconds(300);
  Served t(l);
  // A stream's chunks, 10 ms apart, keep coming for longer than the deadline: 60 of them.
  const Socket c(dial(t.port()));
  send_all(c.fd, get("/ticks"));
  std::string r;
  std::size_t ticks = 0;
  for (const auto guard = Clock::now() + std::chrono::seconds(20); ticks < 60 && Clock::now() < guard;) {
    pollfd p{c.fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const auto n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    r.append(buf, static_cast<std::size_t>(n));
    ticks = 0;
    for (std::size_t at = r.find("tick\n"); at != std::string::npos; at = r.find("tick\n", at + 1)) ++ticks;
  }
  CHECK(ticks >= 60);  // 600 ms of them at least, the deadline's 300 ms passed: not cut
}

TEST_CASE("http server: a chunked stream is written from a worker; a handler sees its client leave; stopping ends a stream") {
  auto s = std::make_unique<Served>();
  {  // the client sends its request and leaves before the answer
    const Socket c(dial(s->port()));
    send_all(c.fd, get("/wait"));
  }
  for (const auto guard = Clock::now() + std::chrono::seconds(10); s->saw_gone == 0 && Clock::now() < guard;)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(s->saw_gone == 1);
  const Socket c(dial(s->port()));
  send_all(c.fd, get("/ticks"));
  std::string r;
  for (const auto guard = Clock::now() + std::chrono::seconds(10); r.find("tick\n\r\n5\r\ntick\n\r\n5\r\ntick\n") == std::string::npos && Clock::now() < guard;) {
    pollfd p{c.fd, POLLIN, 0};
    char buf[4096];
    if (::poll(&p, 1, 100) <= 0) continue;
    const auto n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    r.append(buf, static_cast<std::size_t>(n));
  }
  CHECK(status_of(r) == 200);
  CHECK(r.find("Transfer-Encoding: chunked") != std::string::npos);
  CHECK(r.find("tick\n\r\n5\r\ntick\n\r\n5\r\ntick\n") != std::string::npos);  // three chunks of it, framed
  s.reset();  // the stream stops at its next chunk; nothing waits for the client
  bool closed = false;
  read_until_closed(c.fd, std::chrono::seconds(5), closed);
  CHECK(closed);
}

TEST_CASE("http server: binding a port in use throws NetworkError naming the option and address; a bad address is refused") {
  Served first;
  const std::string addr = "127.0.0.1:" + std::to_string(first.port());
  std::string message;
  try {
    HttpServer second(addr, "--metrics");
  } catch (const ringattn::NetworkError& e) {
    message = e.what();
  }
  CHECK(message.find("--metrics " + addr) != std::string::npos);
  CHECK(message.find("in use") != std::string::npos);
  CHECK_THROWS_AS(HttpServer("127.0.0.1", "--metrics"), ringattn::InvalidArgument);
  CHECK_THROWS_AS(HttpServer("127.0.0.1:99999", "--metrics"), ringattn::InvalidArgument);
  CHECK_THROWS_AS(HttpServer("192.0.2.1:0", "--metrics"), ringattn::NetworkError);  // not this host's
  HttpLimits none;
  none.threads = 0;
  CHECK_THROWS_AS(HttpServer("127.0.0.1:0", "--metrics", none), ringattn::InvalidArgument);
}

TEST_CASE("http server: every limit below 1 is refused naming its field") {
  const auto refusal = [](const std::function<void(HttpLimits&)>& set) {
    HttpLimits l;
    set(l);
    try {
      HttpServer server("127.0.0.1:0", "--test", l);
    } catch (const ringattn::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  using std::chrono::milliseconds;
  const std::pair<const char*, std::function<void(HttpLimits&)>> cases[] = {
      {"head_bytes", [](HttpLimits& l) { l.head_bytes = 0; }},
      {"body_bytes", [](HttpLimits& l) { l.body_bytes = 0; }},
      {"buffered_bytes", [](HttpLimits& l) { l.buffered_bytes = 0; }},
      {"head_deadline", [](HttpLimits& l) { l.head_deadline = milliseconds(0); }},
      {"request_deadline", [](HttpLimits& l) { l.request_deadline = milliseconds(-5); }},
      {"write_deadline", [](HttpLimits& l) { l.write_deadline = milliseconds(0); }},
      {"idle", [](HttpLimits& l) { l.idle = milliseconds(0); }},
      {"queue_deadline", [](HttpLimits& l) { l.queue_deadline = milliseconds(0); }},
      {"connections", [](HttpLimits& l) { l.connections = 0; }},
      {"per_client", [](HttpLimits& l) { l.per_client = 0; }},
      {"threads", [](HttpLimits& l) { l.threads = 0; }},
      {"per_client_busy", [](HttpLimits& l) { l.per_client_busy = -1; }},
      {"keep_alive_requests", [](HttpLimits& l) { l.keep_alive_requests = 0; }},
  };
  for (const auto& [field, set] : cases) {
    CAPTURE(field);
    const std::string message = refusal(set);
    CHECK(message.find("--test: the HTTP server's " + std::string(field)) != std::string::npos);
  }
}

TEST_CASE("http server: when it cannot start (no descriptor for its epoll) it throws and closes its listener") {
  const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // the lowest free descriptor
  REQUIRE(probe >= 0);
  ::close(probe);
  rlimit was{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &was) == 0);
  std::string message;
  {
    // Only `probe` is left below the limit: the listener takes it, the gate's epoll finds none.
    struct Restore {
      rlimit to;
      ~Restore() { ::setrlimit(RLIMIT_NOFILE, &to); }
    } restore{was};
    rlimit tight = was;
    tight.rlim_cur = static_cast<rlim_t>(probe) + 1;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
    try {
      HttpServer server("127.0.0.1:0", "--test");
    } catch (const ringattn::NetworkError& e) {
      message = e.what();
    }
  }
  CHECK(message.find("--test 127.0.0.1:0: the HTTP server's gate") != std::string::npos);
  const int after = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  CHECK(after == probe);  // the listener's descriptor is free again
  if (after >= 0) ::close(after);
}

TEST_CASE("http server: an IPv6 literal in brackets") {
  const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool have_v6 = probe >= 0 && ::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (probe >= 0) ::close(probe);
  if (!have_v6) {
    ::test::skip("no IPv6 loopback here ([::1]:0 cannot be bound)");
    return;
  }
  Served s(Served::small_limits(), "[::1]:0");
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  a.sin6_port = htons(s.port());
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  send_all(fd, get("/metrics"));
  bool closed = false;
  const std::string text = read_until_closed(fd, std::chrono::seconds(3), closed);
  ::close(fd);
  CHECK(status_of(text) == 200);
}

TEST_CASE("http server: destroying it with connections open returns promptly and refuses new ones") {
  int port = 0;
  std::vector<int> open;
  const auto t0 = Clock::now();
  {
    Served s;
    port = s.port();
    for (int i = 0; i < 3; ++i) open.push_back(dial(port));
    send_all(open[1], "GET /metrics HTTP/1.1\r\n");  // half a head
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(Clock::now() - t0 < std::chrono::seconds(1));
  for (const int fd : open) {
    bool closed = false;
    read_until_closed(fd, std::chrono::seconds(1), closed);
    CHECK(closed);
    ::close(fd);
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0);
  ::close(fd);
}
