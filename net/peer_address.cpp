// "host:port" addresses of the transport's peers.
#include <netdb.h>
#include <sys/socket.h>

#include <charconv>

#include "net/transport.hpp"
#include "ringattn/error.hpp"

namespace ringattn::net {

std::string PeerAddress::text() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

PeerAddress parse_peer_address(const std::string& text, const std::string& what) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw InvalidArgument(what + ": expected host:port, got '" + text + "'");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);  // [v6]
  unsigned port = 0;
  const char* b = text.data() + colon + 1;
  const char* e = text.data() + text.size();
  const auto [p, ec] = std::from_chars(b, e, port);
  if (ec != std::errc() || p != e || port > 65535)
    throw InvalidArgument(what + ": port '" + std::string(b, e) + "' in '" + text + "' is not a number in 0..65535");
  return {host, static_cast<std::uint16_t>(port)};
}

std::string numeric_host(const std::string& host, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || res == nullptr)
    throw InvalidArgument(what + ": cannot resolve '" + host + "': " + ::gai_strerror(rc));
  char buf[NI_MAXHOST];
  const int rc = ::getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(res);
  if (rc != 0) throw InvalidArgument(what + ": cannot resolve '" + host + "': " + ::gai_strerror(rc));
  return buf;
}

}  // namespace ringattn::net
