// The byte stream under one connection: a TCP socket, or TLS over it when encryption in
// transit is on. Links and the handshake read and write through this type only, so the
// frame code is the same in both modes; the choice is made at run time per connection.
// It models Asio's AsyncReadStream/AsyncWriteStream, so asio::async_read/async_write
// work on it with any completion token.
#pragma once

#include <asio/async_result.hpp>
#include <asio/buffer.hpp>
#include <asio/ssl/stream.hpp>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "net/tcp/socket_options.hpp"

namespace ringattn::net::tcp {

using TlsStream = asio::ssl::stream<Socket>;

class Stream {
 public:
  using executor_type = Socket::executor_type;

  explicit Stream(Socket socket) : socket_(std::move(socket)) {}
  // A socket on which a TLS session was (or is about to be) established; the context
  // must outlive the stream.
  explicit Stream(std::unique_ptr<TlsStream> tls) : socket_(tls->get_executor()), tls_(std::move(tls)) {}

  executor_type get_executor() { return socket().get_executor(); }
  Socket& socket() { return tls_ ? tls_->next_layer() : socket_; }  // under TLS: the lowest layer
  const Socket& socket() const { return tls_ ? tls_->next_layer() : socket_; }
  TlsStream* tls() { return tls_.get(); }
  bool is_tls() const { return tls_ != nullptr; }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          if (tls_) tls_->async_read_some(b, std::move(handler));
          else socket_.async_read_some(b, std::move(handler));
        },
        token, buffers);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (tls_) tls_->async_write_some(b, std::move(handler));
          else socket_.async_write_some(b, std::move(handler));
        },
        token, buffers);
  }

  // Best effort, never throw. cancel() ends pending operations; shutdown_send() sends
  // TCP's FIN (under TLS without a close_notify: the frame protocol's own BYE/ERROR says
  // goodbye, and a bounded close must not wait on the peer's answer).
  void cancel() {
    std::error_code ignored;
    socket().cancel(ignored);
  }
  void shutdown_send() {
    std::error_code ignored;
    socket().shutdown(asio::socket_base::shutdown_send, ignored);
  }
  void close() {
    std::error_code ignored;
    socket().close(ignored);
  }
  bool is_open() const { return socket().is_open(); }

  // "a:p" of either end, "?" if the socket is closed.
  std::string endpoint_text(bool remote) const { return tcp::endpoint_text(socket(), remote); }

 private:
  Socket socket_;  // unused (closed) under TLS
  std::unique_ptr<TlsStream> tls_;
};

}  // namespace ringattn::net::tcp
