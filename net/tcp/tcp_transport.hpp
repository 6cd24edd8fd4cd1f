// The TCP backend of Transport on standalone Asio.
//
// Threads: the caller's threads post work and block in wait(); one I/O thread runs the
// io_context, owns every socket and runs all coroutines (accept, dial, handshakes, link
// readers/writers), so link state needs no locks. The only shared state is the
// phase/failure below (one mutex), each request's completion and the links' liveness
// records (atomics).
//
// Links: per peer rank, one link out (this rank sends its data frames on it) and one
// in (the peer's frames arrive on it), each a TCP connection dialled by the sender. The
// ring's two are made by connect(); any other is dialled on the first isend to that
// rank (LinkKind::p2p). Requests posted before their link exists wait for it.
//
// Accepting: from construction until close, an accept loop serves every incoming
// connection in its own coroutine, each handshake under its own short deadline, so an
// idle socket, a health probe or a port scanner never delays the real predecessor.
// Connections that do not prove the shared secret are dropped with a log line; an
// authenticated peer that disagrees on the ring's limits fails the transport.
//
// Failure policy: the first error of any link, any wait() whose peer fell silent or
// stalled, and any connect failure calls fail(cause) on the I/O thread: every link is
// shut down (ERROR with the cause and its origin rank to the peers), every pending
// request completes with the cause, and later requests fail at once. One clear cause per
// rank, and nothing can block past its deadline.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <condition_variable>
#include <deque>
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

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportConfig& config);
  ~TcpTransport() override;

  int rank() const override { return config_.rank; }
  int world() const override { return config_.world; }
  std::uint16_t listen_port() const override { return port_; }
  void connect(const std::vector<PeerAddress>& peers) override;
  Request isend(int to, const Tag& tag, Payload payload, std::optional<std::uint32_t> crc) override;
  Request irecv(int from, const Tag& tag, std::span<std::byte> buffer) override;
  Request irecv(int from, const Tag& tag, BufferFor buffer_for) override;
  FrameHeader wait(Request& request) override;
  bool test(const Request& request) const override;
  TransportStats stats() const override;
  Liveness& liveness() override { return liveness_; }
  std::string failure() const override;
  void announce_leaving() override;
  std::vector<int> leaving_peers() const override;
  void abort(FailureCause cause, int origin, const std::string& message) override;
  void close() override;

 private:
  using Clock = std::chrono::steady_clock;
  // How long a waiter gives the I/O thread to act on a deadline before stopping it.
  static constexpr std::chrono::seconds kAbortGrace{5};
  // Handshakes in progress at once; connections beyond are closed at once.
  static constexpr std::size_t kMaxPendingHandshakes = 64;
  enum class Phase : std::uint8_t { idle, connecting, connected, failed, closed };

  // What this rank has with one peer (I/O thread).
  struct Peer {
    Link* out = nullptr;  // owned by out_links_
    Link* in = nullptr;   // owned by in_links_
    std::deque<std::shared_ptr<PendingOp>> waiting_out, waiting_in;  // posted before the link was up
    bool dialing = false;
  };

  // I/O thread (accepting and dialling are in tcp_connect.cpp).
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> serve_incoming(Socket socket);
  asio::awaitable<void> dial(int peer, LinkKind kind, Clock::time_point deadline);
  std::optional<std::pair<int, bool>> missing_link() const;  // {rank, outgoing}
  Stream make_stream(Socket socket, Role role);
  void add_link(std::unique_ptr<Link> link);
  void route(std::shared_ptr<PendingOp> op);
  std::string peer_name(int peer, bool receiving) const;  // "predecessor rank 1", "rank 3"
  void link_ready();
  void connect_deadline_passed();
  void fail(FailureCause cause, int origin, const std::string& message);
  void abort_connect_phase(const std::optional<ErrorInfo>& why);
  void shutdown_links(const std::string& cause, const std::optional<ErrorInfo>& error);
  Hello hello_template(LinkKind kind) const;
  HandshakeParams handshake_params(Role role, int expected_rank, LinkKind kind, Stream& stream, std::string from);
  // Unregisters the stream; true if this rank aborted its handshake.
  bool handshake_done(Stream& stream) {
    auto it = handshaking_.find(&stream);
    const bool aborted = it != handshaking_.end() && it->second.aborted;
    if (it != handshaking_.end()) handshaking_.erase(it);
    return aborted;
  }
  std::string prefix() const { return "rank " + std::to_string(config_.rank) + ": "; }

  // Caller threads.
  Request post(std::shared_ptr<PendingOp> op);
  void fail_from_caller(FailureCause cause, int origin, const std::string& message);
  void stop_io_thread();

  TransportConfig config_;
  std::string ms_connect_, ms_io_;  // timeouts as text for messages
  std::shared_ptr<asio::ssl::context> tls_client_, tls_server_;  // when config_.tls

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  Acceptor acceptor_;
  std::uint16_t port_ = 0;
  std::unique_ptr<Counters[]> counters_;  // [world]: what the links moved, by peer rank
  Liveness liveness_;
  LinkEnv env_;

  // I/O thread only (and after it stopped).
  std::vector<Peer> peers_;                  // by rank
  std::vector<PeerAddress> addresses_;       // by rank, from connect()
  std::vector<std::unique_ptr<Link>> links_;  // every link, in the order made
  struct Handshaking {
    std::string from;  // remote address (or the dial target)
    std::shared_ptr<std::optional<ErrorInfo>> abort;
    bool aborted = false;   // ended by abort_connect_phase, not by the peer
    bool incoming = false;  // accepted (not dialled by this rank)
  };
  std::map<Stream*, Handshaking> handshaking_;  // streams in a handshake, cancelled on abort
  asio::steady_timer backoff_timer_;
  bool accepting_ = true;
  bool dial_aborted_ = false;
  int dropped_connections_ = 0;
  std::string last_dropped_;

  // Shared between caller threads and the I/O thread.
  mutable std::mutex mu_;
  std::vector<bool> leaving_;  // by rank, under mu_: its PING asked to leave
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
