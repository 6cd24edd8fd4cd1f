// The daemon's HTTP server (src/serve/http_server.hpp: cpp-httplib with our bounds) from a
// plain socket client on loopback: answers and keep-alive, and each bound an untrusted
// client cannot get past — the head's size (one long line or a flood of short ones), the
// body's size however framed, one deadline for the whole request (slowloris), a response
// before the body closes the connection (no smuggled request), connections per client
// address (127.0.0.2 is served while 127.0.0.1 hoards). The audit's reproductions.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ringattn/error.hpp"
#include "src/serve/http_server.hpp"
#include "tests/free_port.hpp"
#include "tests/skip.hpp"

using ringattn::serve::HttpLimits;
using ringattn::serve::HttpServer;
using Clock = std::chrono::steady_clock;

namespace {

// A server with the routes the cases use; `smuggled` counts requests to /smuggled.
struct Served {
  std::atomic<int> smuggled{0};
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

int dial(int port, const char* from = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &src.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0);  // the client's own address
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
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

// One request on its own connection that asks to close: the whole reply.
std::string exchange(int port, const std::string& request, const char* from = "127.0.0.1") {
  const int fd = dial(port, from);
  send_all(fd, request);
  bool closed = false;
  std::string text = read_until_closed(fd, std::chrono::seconds(5), closed);
  ::close(fd);
  return text;
}

std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"; }

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

TEST_CASE("http server: the body is bounded however framed; a response before the body closes the connection") {
  Served s;
  // Content-Length over the limit: 413 before the body is read.
  std::string r = exchange(s.port(), "POST /echo HTTP/1.1\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n");
  CHECK(status_of(r) == 413);
  r = exchange(s.port(), "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
  CHECK(r.substr(r.find("\r\n\r\n") + 4) == "5");
  // Chunked: cut at the limit, never read whole.
  const int fd = dial(s.port());
  send_all(fd, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string chunk = "1000\r\n" + std::string(0x1000, 'c') + "\r\n";
  std::size_t sent = 0;
  while (sent < (64u << 20) && send_all(fd, chunk)) sent += chunk.size();
  bool closed = false;
  r = read_until_closed(fd, std::chrono::seconds(5), closed);
  ::close(fd);
  CHECK(sent < (64u << 20));
  CHECK(status_of(r) != 200);
  // A refusal before the body: the body (here a whole second request) is not served.
  r = exchange(s.port(), "POST /locked HTTP/1.1\r\nContent-Length: 40\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n\r\n\r\n");
  CHECK(status_of(r) == 401);
  CHECK(r.find("smuggled") == std::string::npos);
  CHECK(s.smuggled == 0);
}

TEST_CASE("http server: one deadline for the whole request — a client sending a byte at a time is cut (slowloris)") {
  Served s;  // 1.5 s per request
  const int fd = dial(s.port());
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + std::string(200, 's') + "\r\n\r\n";
  const auto t0 = Clock::now();
  std::size_t sent = 0;
  for (; sent < request.size(); ++sent) {  // 50 ms a byte: 11 s for the request, each read well within any per-read timeout
    if (!send_all(fd, request.substr(sent, 1))) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) break;  // the server answered or closed
  }
  bool closed = false;
  read_until_closed(fd, std::chrono::seconds(3), closed);
  ::close(fd);
  CHECK(closed);
  CHECK(sent < request.size());  // cut before the client finished
  CHECK(Clock::now() - t0 < std::chrono::seconds(8));  // hang guard
}

TEST_CASE("http server: one client address holds a few connections at most; another address is still served") {
  Served s;  // 6 threads, 3 per client
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(dial(s.port()));
    send_all(held.back(), "GET /metr");  // half a head: each holds a thread
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string refused = exchange(s.port(), get("/metrics"));
  CHECK(status_of(refused) == 503);
  CHECK(refused.find("too_many_connections") != std::string::npos);
  CHECK(status_of(exchange(s.port(), get("/metrics"), "127.0.0.2")) == 200);  // someone else: served at once
  for (const int fd : held) ::close(fd);
  int status = 0;  // the server learns of the closes when it next reads them: retry briefly
  for (int attempt = 0; attempt < 40 && status != 200; ++attempt) {
    if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = status_of(exchange(s.port(), get("/metrics")));
  }
  CHECK(status == 200);
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
