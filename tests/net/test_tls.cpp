// TLS 1.3 PSK contexts over a real loopback TCP connection: the same token gives an
// encrypted, mutually authenticated stream that carries data intact both ways at once;
// a different token, a client without the PSK, a server with a certificate instead of
// the PSK, and a peer that does not speak TLS all fail the handshake. Every scenario
// runs its io_context for a bounded time, so a failing test cannot hang.
#include <doctest/doctest.h>

#include "net/tcp/coroutines.hpp"  // first: Asio's coroutine headers under its warning policy

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/ssl.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "net/tcp/tls.hpp"
#include "ringattn/error.hpp"

using namespace ringattn;
using namespace ringattn::net::tcp;

namespace {

using Stream = asio::ssl::stream<asio::ip::tcp::socket>;
using Clock = std::chrono::steady_clock;
constexpr auto kDeadline = std::chrono::seconds(20);
constexpr const char* kToken = "0123456789abcdef0123456789abcdef";
constexpr const char* kOtherToken = "0123456789abcdef0123456789abcdeF";

// One TCP connection over 127.0.0.1 (port 0). The connection sits in the listen backlog
// before accept(), so neither blocking call waits on the other.
struct TcpPair {
  asio::io_context io;
  asio::ip::tcp::socket client{io}, server{io};
  TcpPair() {
    asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
    client.connect(acceptor.local_endpoint());
    server = acceptor.accept();
  }
  // Runs everything spawned on `io` to completion, or gives up at the deadline.
  Clock::duration run() {
    const auto start = Clock::now();
    io.run_for(kDeadline);
    return Clock::now() - start;
  }
};

struct Side {
  bool finished = false;  // the handshake completed, successfully or not
  std::error_code ec;
  std::string description;  // tls_describe() after a successful handshake
  std::size_t sent = 0, received = 0;
  std::error_code io_ec;
};

asio::awaitable<void> handshake(Stream& s, Stream::handshake_type type, Side& side) {
  std::error_code ec;
  co_await s.async_handshake(type, asio::redirect_error(asio::use_awaitable, ec));
  side.ec = ec;
  side.finished = true;
  if (!ec) side.description = tls_describe(s.native_handle());
}

asio::awaitable<void> receive_all(Stream& s, std::span<std::byte> in, Side& side) {
  std::error_code ec;
  side.received = co_await asio::async_read(s, asio::buffer(in.data(), in.size()),
                                            asio::redirect_error(asio::use_awaitable, ec));
  if (ec) side.io_ec = ec;
}

// Handshake, then send `out` while receiving `in`: both ends send at once, so each must
// read while it writes or both would stall on full socket buffers.
asio::awaitable<void> handshake_and_exchange(Stream& s, Stream::handshake_type type, Side& side,
                                             std::span<const std::byte> out, std::span<std::byte> in) {
  co_await handshake(s, type, side);
  if (side.ec) co_return;
  asio::co_spawn(s.get_executor(), receive_all(s, in, side), asio::detached);
  std::error_code ec;
  side.sent = co_await asio::async_write(s, asio::buffer(out.data(), out.size()),
                                         asio::redirect_error(asio::use_awaitable, ec));
  if (ec) side.io_ec = ec;
}

// Handshakes `client_ctx` against `server_ctx` over a fresh connection.
std::pair<Side, Side> handshake_pair(asio::ssl::context& client_ctx, asio::ssl::context& server_ctx) {
  TcpPair tcp;
  Stream client(std::move(tcp.client), client_ctx), server(std::move(tcp.server), server_ctx);
  Side c, s;
  asio::co_spawn(tcp.io, handshake(client, Stream::client, c), asio::detached);
  asio::co_spawn(tcp.io, handshake(server, Stream::server, s), asio::detached);
  const auto took = tcp.run();
  CHECK(took < kDeadline);
  return {c, s};
}

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    const std::uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  return v;
}

// A server that does not know the PSK but presents a (self-signed) certificate.
std::shared_ptr<asio::ssl::context> impostor_server_context() {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tlsv13_server);
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  REQUIRE(key != nullptr);
  X509* cert = X509_new();
  REQUIRE(cert != nullptr);
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("impostor"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  REQUIRE(X509_sign(cert, key, EVP_sha256()) > 0);
  REQUIRE(SSL_CTX_use_certificate(ctx->native_handle(), cert) == 1);
  REQUIRE(SSL_CTX_use_PrivateKey(ctx->native_handle(), key) == 1);
  X509_free(cert);
  EVP_PKEY_free(key);
  return ctx;
}

}  // namespace

TEST_CASE("tls: the same token gives TLS 1.3 with PSK and a key share, and 8 MiB each way arrive intact") {
  const auto client_ctx = make_tls_context(kToken, TlsRole::client);
  const auto server_ctx = make_tls_context(kToken, TlsRole::server);
  constexpr std::size_t kBytes = 8u << 20;
  const auto to_server = random_bytes(kBytes, 1), to_client = random_bytes(kBytes, 2);
  std::vector<std::byte> at_server(kBytes), at_client(kBytes);

  TcpPair tcp;
  Stream client(std::move(tcp.client), *client_ctx), server(std::move(tcp.server), *server_ctx);
  Side c, s;
  asio::co_spawn(tcp.io, handshake_and_exchange(client, Stream::client, c, to_server, at_client), asio::detached);
  asio::co_spawn(tcp.io, handshake_and_exchange(server, Stream::server, s, to_client, at_server), asio::detached);
  const auto took = tcp.run();
  CHECK(took < kDeadline);

  for (const Side* side : {&c, &s}) {
    INFO((side == &c ? "client" : "server") << ": " << side->ec.message() << " / " << side->io_ec.message());
    REQUIRE(side->finished);
    REQUIRE_FALSE(side->ec);
    CHECK_FALSE(side->io_ec);
    // The PSK authenticated the peer, and a key share gave forward secrecy.
    CHECK(side->description.rfind("TLSv1.3 TLS_AES_128_GCM_SHA256, PSK, key share ", 0) == 0);
    CHECK(side->sent == kBytes);
    CHECK(side->received == kBytes);
  }
  MESSAGE("negotiated: " << c.description);
  CHECK(SSL_version(client.native_handle()) == TLS1_3_VERSION);
  CHECK(SSL_session_reused(server.native_handle()) == 1);
  CHECK(std::memcmp(at_server.data(), to_server.data(), kBytes) == 0);
  CHECK(std::memcmp(at_client.data(), to_client.data(), kBytes) == 0);
}

TEST_CASE("tls: a different token fails the handshake on both sides, promptly") {
  const auto client_ctx = make_tls_context(kOtherToken, TlsRole::client);
  const auto server_ctx = make_tls_context(kToken, TlsRole::server);
  const auto [c, s] = handshake_pair(*client_ctx, *server_ctx);
  INFO("client: " << c.ec.message() << "; server: " << s.ec.message());
  REQUIRE(c.finished);
  REQUIRE(s.finished);
  CHECK(c.ec);
  CHECK(s.ec);
}

TEST_CASE("tls: the server refuses a TLS client without the PSK") {
  asio::ssl::context no_psk(asio::ssl::context::tlsv13_client);
  no_psk.set_verify_mode(asio::ssl::verify_none);
  const auto server_ctx = make_tls_context(kToken, TlsRole::server);
  const auto [c, s] = handshake_pair(no_psk, *server_ctx);
  INFO("client: " << c.ec.message() << "; server: " << s.ec.message());
  REQUIRE(s.finished);
  CHECK(s.ec);
  CHECK(c.ec);
}

TEST_CASE("tls: the client refuses a server that shows a certificate instead of the PSK") {
  const auto client_ctx = make_tls_context(kToken, TlsRole::client);
  const auto impostor = impostor_server_context();
  const auto [c, s] = handshake_pair(*client_ctx, *impostor);
  INFO("client: " << c.ec.message() << "; server: " << s.ec.message());
  REQUIRE(c.finished);
  CHECK(c.ec);
}

TEST_CASE("tls: a peer that does not speak TLS fails the server handshake without hanging") {
  const auto server_ctx = make_tls_context(kToken, TlsRole::server);
  for (const std::string& garbage : {std::string("GET / HTTP/1.1\r\nHost: ringattn\r\n\r\n"), std::string()}) {
    CAPTURE(garbage);
    TcpPair tcp;
    Stream server(std::move(tcp.server), *server_ctx);
    Side s;
    asio::co_spawn(tcp.io, handshake(server, Stream::server, s), asio::detached);
    if (garbage.empty())
      tcp.client.close();  // connect, then hang up
    else
      asio::write(tcp.client, asio::buffer(garbage));
    const auto took = tcp.run();
    CHECK(took < kDeadline);
    INFO("server: " << s.ec.message());
    REQUIRE(s.finished);
    CHECK(s.ec);
  }
}

TEST_CASE("tls: an empty secret is refused; describing a connection before its handshake says so") {
  CHECK_THROWS_AS(make_tls_context("", TlsRole::client), InvalidArgument);
  CHECK_THROWS_AS(make_tls_context("", TlsRole::server), InvalidArgument);
  CHECK(tls_describe(nullptr) == "TLS handshake not complete");
  const auto ctx = make_tls_context(kToken, TlsRole::client);
  SSL* ssl = SSL_new(ctx->native_handle());
  REQUIRE(ssl != nullptr);
  CHECK(tls_describe(ssl) == "TLS handshake not complete");
  SSL_free(ssl);
}
