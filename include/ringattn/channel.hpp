// ringattn/channel.hpp — an authenticated message channel over TCP: how a client talks
// to a ringattn daemon's control port, and how a daemon listens for clients.
//
// A TCP connection, TLS 1.3 when asked, authenticated exactly like the ring's links (the
// shared token, link kind "control": the client proves the token first). Then messages,
// each a 16-byte header and a payload:
//
//   offset size field
//      0    4  magic    "RACT"
//      4    1  type     1 JSON (UTF-8 text, at most kMaxChannelJson bytes), 2 TENSOR (raw bytes)
//      5    3  reserved 0
//      8    8  length   payload bytes
//
// A JSON payload is bounded before it is read; a TENSOR is read only into a buffer the
// reader sized from something it already validated, and its length must match exactly.
// Every read and write has a deadline that measures silence: a peer that moves nothing
// for `idle` fails the channel (long tensors move in chunks, each under the deadline).
// Failures throw NetworkError naming the peer and what to do.
//
// Built on Asio's C++20 coroutines (standalone Asio, libasio-dev): every operation is an
// asio::awaitable run on the caller's executor. A Channel is a handle: copies share one
// connection (e.g. a coroutine that watches for the client going away while another
// writes results).
#pragma once

// GCC 12 with -fsanitize=address reports -Wmismatched-new-delete at the end of every
// coroutine whose frame Asio allocates (a false positive: operator new and delete both
// come from Asio's awaitable_frame_base). Silenced for the files that use this API, so
// sanitizer builds with -Werror pass.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ringattn {

inline constexpr std::size_t kMaxChannelJson = std::size_t{1} << 20;

enum class ChannelMessage : std::uint8_t { json = 1, tensor = 2 };

struct ChannelHead {
  ChannelMessage type = ChannelMessage::json;
  std::uint64_t length = 0;
};

// Called with the payload bytes moved so far, as a tensor moves.
using ChannelProgress = std::function<void(std::uint64_t done)>;

struct ChannelOptions {
  std::string secret;  // the shared token (load_token), the same as the daemons'
  bool tls = false;    // TLS 1.3; both ends must agree
  std::chrono::milliseconds idle{30000};  // the longest silence of any read or write
};

class Channel {
 public:
  // The client's side: connects to `address` ("host:port", a name or a numeric address),
  // TLS if asked, and proves the token, all within options.idle. Throws NetworkError
  // naming the address and what to do (is a daemon there? the token? --tls on both ends?).
  static asio::awaitable<Channel> connect(std::string address, ChannelOptions options);

  Channel();  // not connected
  ~Channel();
  Channel(const Channel&);
  Channel& operator=(const Channel&);
  Channel(Channel&&) noexcept;
  Channel& operator=(Channel&&) noexcept;

  // "daemon at host:port" (client side) or "client a.b.c.d:port" (daemon side).
  const std::string& peer() const;
  std::chrono::milliseconds idle() const;
  void set_idle(std::chrono::milliseconds idle);

  asio::awaitable<void> write_json(const std::string& json);
  asio::awaitable<void> write_tensor(std::span<const std::byte> bytes, const ChannelProgress& progress = {});
  // One TENSOR made of `parts` laid end to end (e.g. a shard's row runs straight from a
  // whole tensor: no gathering copy).
  asio::awaitable<void> write_tensor(std::vector<std::span<const std::byte>> parts, const ChannelProgress& progress = {});

  // Bytes as they are, outside the framing: a testing facility, for tests that play a
  // slow or misbehaving peer. A client never needs it.
  asio::awaitable<void> write_bytes(std::span<const std::byte> bytes);

  asio::awaitable<ChannelHead> read_head();
  // A JSON message's payload after read_head said it is one (length bounded first).
  asio::awaitable<std::string> read_json(const ChannelHead& head);
  asio::awaitable<std::string> read_json();
  // A TENSOR of exactly into.size() bytes.
  asio::awaitable<void> read_tensor(const ChannelHead& head, std::span<std::byte> into, const ChannelProgress& progress = {});
  asio::awaitable<void> read_tensor(std::span<std::byte> into, const ChannelProgress& progress = {});

  // Completes when the other side closes the connection or sends anything (a client that
  // sends nothing more has gone away when this returns); says which.
  asio::awaitable<std::string> wait_closed();
  void close();  // best effort, never throws

  // The daemon's side of the handshake, on a channel from ChannelListener::accept():
  // empty when the client proved the token within `deadline`, else why it was dropped.
  // A client without the token cannot make the daemon do anything else.
  asio::awaitable<std::string> authenticate(std::chrono::milliseconds deadline);

  struct Impl;

 private:
  explicit Channel(std::shared_ptr<Impl> impl);
  Impl& live() const;  // throws when not connected
  std::shared_ptr<Impl> impl_;
  friend class ChannelListener;
};

class ChannelListener {
 public:
  // Listens on `listen` ("host:port", a numeric address; port 0 picks one) on `executor`.
  // Throws NetworkError naming `what` (e.g. "--control") and the address if it cannot.
  ChannelListener(asio::any_io_executor executor, const std::string& listen, ChannelOptions options,
                  const std::string& what);
  ~ChannelListener();
  ChannelListener(const ChannelListener&) = delete;
  ChannelListener& operator=(const ChannelListener&) = delete;

  std::uint16_t port() const;
  // The next connection, not yet authenticated (call authenticate); nullopt once closed.
  asio::awaitable<std::optional<Channel>> accept();
  void close();  // ends a pending accept

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A plain TCP acceptor on `listen` ("host:port"; a name is resolved, its first address
// that binds is used), reuse_address set: for other protocols beside a daemon's channel
// (its HTTP endpoint). Throws NetworkError naming `what` and the address.
asio::ip::tcp::acceptor listen_tcp(asio::any_io_executor executor, const std::string& listen, const std::string& what);

// "a.b.c.d:port" of a socket's other end, "?" when it has none.
std::string remote_text(const asio::ip::tcp::socket& socket);

}  // namespace ringattn
