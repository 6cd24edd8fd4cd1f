// The HTTP endpoint from a plain socket client on loopback: answers, refusals, and the
// bounds a scraper or a stray client cannot get past (head size, deadline, connection cap).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ringattn/error.hpp"
#include "src/serve/http_endpoint.hpp"
#include "tests/free_port.hpp"
#include "tests/skip.hpp"

using ringattn::serve::HttpEndpoint;
using ringattn::serve::HttpResponse;
using Clock = std::chrono::steady_clock;

namespace {

HttpResponse route(const std::string& path) {
  if (path == "/metrics") return {200, "text/plain; version=0.0.4; charset=utf-8", "# TYPE up gauge\nup 1\n"};
  if (path == "/healthz") return {503, "text/plain; charset=utf-8", "forming\n"};
  if (path == "/throw") throw std::runtime_error("boom");
  return {404, "text/plain; charset=utf-8", "not found\n"};
}

int dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void send_all(int fd, const std::string& s) {
  for (std::size_t off = 0; off < s.size();) {
    const auto n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    off += static_cast<std::size_t>(n);
  }
}

// Everything until the peer closes; `closed` false if `timeout` passed first.
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

struct Reply {
  int status = 0;
  std::string head, body;
  bool closed = false;
};

Reply exchange(int port, const std::string& request) {
  const int fd = dial(port);
  send_all(fd, request);
  Reply r;
  const std::string text = read_until_closed(fd, std::chrono::seconds(3), r.closed);
  ::close(fd);
  const auto blank = text.find("\r\n\r\n");
  if (text.rfind("HTTP/1.1 ", 0) != 0 || blank == std::string::npos) return r;
  r.status = std::stoi(text.substr(9, 3));
  r.head = text.substr(0, blank + 2);
  r.body = text.substr(blank + 4);
  return r;
}

std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: t\r\n\r\n"; }

}  // namespace

TEST_CASE("GET answers with the handler's status, type and body, and closes") {
  const int port = ringattn::test::free_port();
  HttpEndpoint ep("127.0.0.1:" + std::to_string(port), route);
  CHECK(ep.port() == port);

  Reply r = exchange(port, get("/metrics?name[]=up"));  // the query is not part of the path
  CHECK(r.closed);
  CHECK(r.status == 200);
  CHECK(r.body == "# TYPE up gauge\nup 1\n");
  CHECK(r.head.find("\r\nContent-Length: 21\r\n") != std::string::npos);
  CHECK(r.head.find("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  CHECK(r.head.find("\r\nConnection: close\r\n") != std::string::npos);

  r = exchange(port, "GET /healthz HTTP/1.0\r\n\r\n");
  CHECK(r.status == 503);
  CHECK(r.body == "forming\n");
  CHECK(r.head.find("\r\nContent-Length: 8\r\n") != std::string::npos);
  CHECK(exchange(port, get("/nope")).status == 404);
  CHECK(exchange(port, get("/throw")).status == 500);  // a throwing handler does not end the endpoint
  CHECK(exchange(port, get("/metrics")).status == 200);
}

TEST_CASE("refusals: 405 for another method, 400 for a malformed request, 431 for an oversized head") {
  HttpEndpoint ep("127.0.0.1:0", route);
  const int port = ep.port();
  REQUIRE(port > 0);

  const Reply post = exchange(port, "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  CHECK(post.status == 405);
  CHECK(post.head.find("\r\nAllow: GET\r\n") != std::string::npos);
  CHECK(exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n").status == 405);

  for (const char* bad : {"GET /metrics\r\n\r\n", "GET  /metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/9\r\n\r\n",
                          "GET metrics HTTP/1.1\r\n\r\n", "\x01\x02 / HTTP/1.1\r\n\r\n",
                          "GET / HTTP/1.1\r\nno colon here\r\n\r\n"})
    CHECK_MESSAGE(exchange(port, bad).status == 400, bad);

  const Reply big = exchange(port, "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(9 << 10, 'a') + "\r\n\r\n");
  CHECK(big.status == 431);
  CHECK(big.closed);
  CHECK(exchange(port, get("/metrics")).status == 200);
}

TEST_CASE("a connection that sends nothing is closed by the read deadline (~5 s)") {
  HttpEndpoint ep("127.0.0.1:0", route);
  const int fd = dial(ep.port());
  send_all(fd, "GET /metr");  // a head that never ends counts as silence too
  const auto t0 = Clock::now();
  bool closed = false;
  const std::string got = read_until_closed(fd, std::chrono::seconds(8), closed);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  CHECK(closed);
  CHECK(got.empty());
  CHECK(waited > 4.0);
  CHECK(waited < 6.5);
}

TEST_CASE("past 32 open connections the next is closed at once; a GET succeeds once one frees") {
  HttpEndpoint ep("127.0.0.1:0", route);
  const int port = ep.port();
  std::vector<int> idle;
  for (int i = 0; i < 32; ++i) idle.push_back(dial(port));

  const int extra = dial(port);  // accepted after the 32 (the accept queue is FIFO), closed unanswered
  bool closed = false;
  const auto t0 = Clock::now();
  CHECK(read_until_closed(extra, std::chrono::seconds(3), closed).empty());
  CHECK(closed);
  CHECK(Clock::now() - t0 < std::chrono::seconds(2));
  ::close(extra);

  bool first_closed = true;  // the first 32 are still waiting for their heads
  read_until_closed(idle.front(), std::chrono::milliseconds(200), first_closed);
  CHECK_FALSE(first_closed);

  ::close(idle.back());
  idle.pop_back();
  int status = 0;  // the endpoint learns of the close asynchronously: retry briefly
  for (int attempt = 0; attempt < 40 && status != 200; ++attempt) {
    if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = exchange(port, get("/metrics")).status;
  }
  CHECK(status == 200);
  for (const int fd : idle) ::close(fd);
}

TEST_CASE("binding a port in use throws NetworkError naming the address; a bad address is refused") {
  HttpEndpoint first("127.0.0.1:0", route);
  const std::string addr = "127.0.0.1:" + std::to_string(first.port());
  std::string message;
  try {
    HttpEndpoint second(addr, route);
  } catch (const ringattn::NetworkError& e) {
    message = e.what();
  }
  CHECK(message.find(addr) != std::string::npos);
  CHECK(message.find("in use") != std::string::npos);
  CHECK_THROWS_AS(HttpEndpoint("127.0.0.1", route), ringattn::InvalidArgument);
  CHECK_THROWS_AS(HttpEndpoint("127.0.0.1:99999", route), ringattn::InvalidArgument);
  CHECK_THROWS_AS(HttpEndpoint("192.0.2.1:0", route), ringattn::NetworkError);  // not this host's
}

TEST_CASE("an IPv6 literal in brackets") {
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
  HttpEndpoint ep("[::1]:0", route);
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  a.sin6_port = htons(ep.port());
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  send_all(fd, get("/healthz"));
  bool closed = false;
  const std::string text = read_until_closed(fd, std::chrono::seconds(3), closed);
  ::close(fd);
  CHECK(text.rfind("HTTP/1.1 503 ", 0) == 0);
}

TEST_CASE("destroying the endpoint with connections open returns promptly and refuses new ones") {
  int port = 0;
  std::vector<int> open;
  const auto t0 = Clock::now();
  {
    HttpEndpoint ep("127.0.0.1:0", route);
    port = ep.port();
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
