// The TCP backend of RingTransport on standalone Asio.
//
// Threads: the caller's threads post work and block in wait(); one I/O thread runs the
// io_context, owns every socket and runs all coroutines (accept, dial, handshakes, link
// readers/writers), so link state needs no locks. The only shared state is the
// phase/failure below (one mutex), each request's completion and the links' liveness
// records (atomics).
//
// Accepting: from construction until close, an accept loop serves every incoming
// connection in its own coroutine, each handshake under its own short deadline, so an
// idle socket, a health probe or a port scanner never delays the real predecessor.
// Connections that do not prove the shared secret are dropped with a log line; an
// authenticated peer that disagrees on the ring or job fails the transport.
//
// Failure policy: the first error of any link, any wait() whose peer fell silent or
// stalled, and any connect failure calls fail(cause) on the I/O thread: every link is
// shut down (ERROR with the cause and its origin rank to the neighbours), every pending
// request completes with the cause, and later requests fail at once. One clear cause per
// rank, and nothing can block past its deadline.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "net/handshake.hpp"
#include "net/tcp/handshake_io.hpp"
#include "net/tcp/link.hpp"
#include "net/tcp/tls.hpp"
#include "net/transport.hpp"

namespace ringattn::net::tcp {

class TcpTransport final : public RingTransport {
 public:
  explicit TcpTransport(const TransportConfig& config);
  ~TcpTransport() override;

  int rank() const override { return config_.rank; }
  int world() const override { return config_.world; }
  std::uint16_t listen_port() const override { return port_; }
  void connect(const std::vector<PeerAddress>& peers) override;
  Request isend(FrameHeader header, std::span<const std::byte> payload, std::optional<std::uint32_t> crc) override;
  Request irecv(std::span<std::byte> buffer) override;
  FrameHeader wait(Request& request) override;
  bool test(const Request& request) const override;
  TransportStats stats() const override;
  Liveness& liveness() override { return liveness_; }
  void close() override;

 private:
  using Clock = std::chrono::steady_clock;
  // How long a waiter gives the I/O thread to act on a deadline before stopping it.
  static constexpr std::chrono::seconds kAbortGrace{5};
  // Handshakes in progress at once; connections beyond are closed at once.
  static constexpr std::size_t kMaxPendingHandshakes = 64;
  enum class Phase : std::uint8_t { idle, connecting, connected, failed, closed };

  // I/O thread (the connect phase is in tcp_connect.cpp).
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> serve_incoming(Socket socket);
  asio::awaitable<void> dial_successor(PeerAddress addr, Clock::time_point deadline);
  Stream make_stream(Socket socket, Role role);
  void link_ready();
  void connect_deadline_passed();
  bool gave_up() const;  // failed or closed (locks mu_)
  void fail(FailureCause cause, int origin, const std::string& message);
  void abort_connect_phase(const std::optional<ErrorInfo>& why);
  void shutdown_links(const std::string& cause, const std::optional<ErrorInfo>& error);
  Hello hello_template() const;
  HandshakeParams handshake_params(Role role, int expected_rank, Stream& stream, std::string from);
  // Unregisters the stream; true if this rank aborted its handshake.
  bool handshake_done(Stream& stream) {
    auto it = handshaking_.find(&stream);
    const bool aborted = it != handshaking_.end() && it->second.aborted;
    if (it != handshaking_.end()) handshaking_.erase(it);
    return aborted;
  }
  std::string prefix() const { return "rank " + std::to_string(config_.rank) + ": "; }

  // Caller threads.
  Request post(std::shared_ptr<PendingOp> op, Link* link);
  void fail_from_caller(FailureCause cause, int origin, const std::string& message);
  void stop_io_thread();

  TransportConfig config_;
  FrameLimits limits_;
  int successor_ = 0, predecessor_ = 0;
  std::string ms_connect_, ms_io_;  // timeouts as text for messages

  std::shared_ptr<asio::ssl::context> tls_client_, tls_server_;  // when config_.tls
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  Acceptor acceptor_;
  std::uint16_t port_ = 0;
  Counters counters_;
  Liveness liveness_;
  LinkEnv env_;

  // Links by peer rank; only touched on the I/O thread (and after it stopped).
  std::map<int, std::unique_ptr<Link>> out_links_, in_links_;
  std::atomic<Link*> out_{nullptr};  // to the successor; set before phase_ becomes connected
  std::atomic<Link*> in_{nullptr};   // from the predecessor

  // Connect phase and accepting (I/O thread).
  struct Handshaking {
    std::string from;  // remote address (or the dial target)
    std::shared_ptr<std::optional<ErrorInfo>> abort;
    bool aborted = false;  // ended by abort_connect_phase, not by the peer
  };
  std::map<Stream*, Handshaking> handshaking_;  // streams in a handshake, cancelled on abort
  asio::steady_timer backoff_timer_;
  bool accepting_ = true;
  bool dial_aborted_ = false;
  bool dialing_ = false;
  int dropped_connections_ = 0;
  std::string last_dropped_;

  // Shared between caller threads and the I/O thread.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::idle;
  std::string failure_;  // first fatal cause, with the rank prefix
  FailureCause failure_cause_ = FailureCause::unknown;
  int failure_origin_ = -1;

  std::thread io_thread_;
  bool io_joined_ = false;
  std::atomic<bool> io_running_{false};
  std::atomic<double> io_cpu_final_{0.0};
};

}  // namespace ringattn::net::tcp
