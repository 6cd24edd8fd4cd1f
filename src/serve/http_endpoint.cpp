// ringattn serve — the HTTP/1.1 endpoint: one io_context on one thread, one coroutine per
// connection.
//
// Every connection is bounded: at most kMaxConnections at once (the next is closed as soon
// as it is accepted), its head read within kReadDeadline into at most kMaxHead bytes, its
// response written within kWriteDeadline. After the response the socket is half-closed and
// read to EOF for a moment (a "lingering close", bounded in time and bytes): closing with a
// request body or the rest of an oversized head still unread would make the kernel send a
// reset, and the client could lose the 405 or 431 it was about to read.
#include "src/serve/http_endpoint.hpp"

#include "ringattn/channel.hpp"  // first Asio include: silences GCC's coroutine false positive

#include <algorithm>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <string_view>
#include <thread>
#include <vector>

#include "src/cli/log.hpp"
#include "ringattn/error.hpp"

namespace ringattn::serve {

namespace {

using asio::ip::tcp;
using namespace std::chrono_literals;

constexpr std::size_t kMaxHead = 8 << 10;
constexpr int kMaxConnections = 32;
constexpr auto kReadDeadline = 5s;
constexpr auto kWriteDeadline = 5s;
constexpr auto kLingerTime = 1s;
constexpr std::size_t kLingerBytes = 64 << 10;

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

std::string response_text(const HttpResponse& r) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + ' ' + reason(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  if (r.status == 405) out += "Allow: GET\r\n";
  out += "Connection: close\r\n\r\n";
  return out + r.body;
}

HttpResponse plain(int status, std::string body) { return {status, "text/plain; charset=utf-8", std::move(body)}; }

bool is_token(std::string_view s) {  // RFC 9110 tchar
  constexpr std::string_view extra = "!#$%&'*+-.^_`|~";
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || extra.find(c) != extra.npos;
  });
}

// The request head (through its blank line): 0 and the path (query removed) if it is a GET
// we can answer, else the status to refuse it with.
int parse_head(std::string_view head, std::string& path) {
  const auto eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == line.npos ? line.npos : line.find(' ', sp1 + 1);
  if (sp2 == line.npos || line.find(' ', sp2 + 1) != line.npos) return 400;
  const auto method = line.substr(0, sp1);
  auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const auto version = line.substr(sp2 + 1);
  if (!is_token(method) || target.empty() || (version != "HTTP/1.1" && version != "HTTP/1.0")) return 400;
  if (std::any_of(target.begin(), target.end(), [](unsigned char c) { return c <= 0x20 || c == 0x7f; })) return 400;
  for (auto pos = eol + 2; pos < head.size();) {  // each header line is "name: value"
    const auto end = head.find("\r\n", pos);
    const auto field = head.substr(pos, end - pos);
    if (!field.empty() && !is_token(field.substr(0, field.find(':')))) return 400;
    if (!field.empty() && field.find(':') == field.npos) return 400;
    pos = end == head.npos ? head.size() : end + 2;
  }
  if (method != "GET") return 405;
  if (const auto scheme = target.find("://"); target.front() != '/' && scheme != target.npos) {  // absolute-form
    const auto slash = target.find('/', scheme + 3);
    target = slash == target.npos ? std::string_view("/") : target.substr(slash);
  }
  if (target.front() != '/') return 400;
  path = std::string(target.substr(0, target.find_first_of("?#")));
  return 0;
}

}  // namespace

struct HttpEndpoint::Impl {
  int active = 0;  // connections being served; endpoint thread only (outlives io's coroutines)
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  Handler handler;
  std::uint16_t port = 0;
  std::thread thread;

  asio::awaitable<void> accept_loop();
  asio::awaitable<void> serve(tcp::socket s);
  HttpResponse respond(const std::string& path) const;
};

asio::awaitable<void> HttpEndpoint::Impl::accept_loop() {
  for (;;) {
    std::error_code ec;
    tcp::socket s = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {  // out of descriptors, say: pause rather than spin
      cli::logger("serve")->warn("http endpoint: accept failed: {}", ec.message());
      asio::steady_timer pause(io, 100ms);
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (active >= kMaxConnections) {
      cli::logger("serve")->debug("http endpoint: {} connections open, closing one from {}", active,
                             remote_text(s));
      s.close(ec);
      continue;
    }
    ++active;
    asio::co_spawn(io, serve(std::move(s)), asio::detached);
  }
}

HttpResponse HttpEndpoint::Impl::respond(const std::string& path) const {
  try {
    return handler(path);
  } catch (const std::exception& e) {
    cli::logger("serve")->warn("http endpoint: handler for {} failed: {}", path, e.what());
    return plain(500, "internal error\n");
  }
}

asio::awaitable<void> HttpEndpoint::Impl::serve(tcp::socket s) {
  struct Slot {
    int& n;
    ~Slot() { --n; }
  } slot{active};
  // The deadline closes the socket, which ends the pending read or write. Its handler owns
  // the socket too, so one that fires as the coroutine ends never finds it gone.
  const auto sock = std::make_shared<tcp::socket>(std::move(s));
  asio::steady_timer deadline(io);
  const auto arm = [&](auto after) {
    deadline.expires_after(after);
    deadline.async_wait([sock](std::error_code ec) {
      if (!ec) sock->close(ec);
    });
  };
  const auto peer = remote_text(*sock);
  std::error_code ec;

  arm(kReadDeadline);
  std::string head;
  const std::size_t n = co_await asio::async_read_until(*sock, asio::dynamic_buffer(head, kMaxHead), "\r\n\r\n",
                                                        asio::redirect_error(asio::use_awaitable, ec));
  if (ec && ec != asio::error::not_found) co_return;  // closed, reset, or silent past the deadline
  std::string path;
  const int refused = ec ? 431 : parse_head(std::string_view(head).substr(0, n), path);
  const HttpResponse r = refused == 431 ? plain(431, "request head over 8 KiB\n")
                         : refused == 405 ? plain(405, "only GET\n")
                         : refused ? plain(refused, "malformed request\n")
                                   : respond(path);
  cli::logger("serve")->debug("http endpoint: {} {} -> {}", peer, refused ? "(refused)" : path, r.status);

  arm(kWriteDeadline);
  co_await asio::async_write(*sock, asio::buffer(response_text(r)), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return;
  sock->shutdown(tcp::socket::shutdown_send, ec);
  arm(kLingerTime);
  char scratch[4096];
  for (std::size_t drained = 0; !ec && drained < kLingerBytes;)
    drained += co_await sock->async_read_some(asio::buffer(scratch), asio::redirect_error(asio::use_awaitable, ec));
  deadline.cancel();
  sock->close(ec);
}

HttpEndpoint::HttpEndpoint(const std::string& listen, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->acceptor = listen_tcp(impl_->io.get_executor(), listen, "HTTP endpoint");
  impl_->port = impl_->acceptor.local_endpoint().port();
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  impl_->thread = std::thread([impl = impl_.get()] {
    for (;;) {
      try {
        impl->io.run();
        return;
      } catch (const std::exception& e) {  // nothing should throw out of a handler; keep serving
        cli::logger("serve")->error("http endpoint: {}", e.what());
      }
    }
  });
}

HttpEndpoint::~HttpEndpoint() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  // The coroutines still suspended (and their sockets) go with io, before `active`.
}

std::uint16_t HttpEndpoint::port() const { return impl_->port; }

}  // namespace ringattn::serve
