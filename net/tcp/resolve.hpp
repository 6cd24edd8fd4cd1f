// The endpoints of a peer's "host:port": the address itself if numeric, else what the
// name resolves to (asynchronously, on the calling coroutine's executor).
#pragma once

#include <asio/ip/tcp.hpp>
#include <asio/this_coro.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "net/transport.hpp"
#include "net/tcp/coroutines.hpp"

namespace ringattn::net::tcp {

inline asio::awaitable<std::vector<asio::ip::tcp::endpoint>> resolve_endpoints(const PeerAddress& addr,
                                                                             std::error_code& ec) {
  std::vector<asio::ip::tcp::endpoint> endpoints;
  if (const auto ip = asio::ip::make_address(addr.host, ec); !ec) {
    endpoints.emplace_back(ip, addr.port);
    co_return endpoints;
  }
  asio::ip::tcp::resolver resolver(co_await asio::this_coro::executor);
  const auto results =
      co_await resolver.async_resolve(addr.host, std::to_string(addr.port), asio::redirect_error(asio::use_awaitable, ec));
  if (!ec)
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  co_return endpoints;
}

}  // namespace ringattn::net::tcp
