// The TCP backend of RingTransport on standalone Asio.
//
// Threads: the caller's threads post work and block in wait(); one I/O thread runs the
// io_context, owns every socket and runs all coroutines (connect, accept, handshakes,
// link readers/writers), so link state needs no locks. The only shared state is the
// phase/failure below (one mutex) and each request's completion.
//
// Links are kept by peer rank and direction, so the all-to-all and decode schedules can
// add connections beside the ring's two without changing the request path.
//
// Failure policy: the first error of any link, any timeout of a wait() and any connect
// failure calls fail(cause) on the I/O thread: every link is shut down (ERROR to the
// neighbours), every pending request completes with the cause, and later requests fail
// at once. One clear cause per rank, and nothing can block past its deadline.
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
#include "net/tcp/link.hpp"
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
  void close() override;

 private:
  using Clock = std::chrono::steady_clock;
  // How long a waiter gives the I/O thread to act on a deadline before stopping it.
  static constexpr std::chrono::seconds kAbortGrace{5};
  enum class Phase : std::uint8_t { idle, connecting, connected, failed, closed };

  // I/O thread (the connect phase is in tcp_connect.cpp).
  asio::awaitable<void> dial_successor(PeerAddress addr);
  asio::awaitable<void> accept_predecessor();
  void connect_task_done(const std::string& error);
  void fail(const std::string& cause);
  void abort_connect_phase();
  void shutdown_links(const std::string& cause, const std::string& error_text);
  Hello hello_template() const;
  std::string prefix() const { return "rank " + std::to_string(config_.rank) + ": "; }

  // Caller threads.
  Request post(std::shared_ptr<PendingOp> op, Link* link);
  void stop_io_thread();

  TransportConfig config_;
  FrameLimits limits_;
  int successor_ = 0, predecessor_ = 0;
  std::string ms_connect_, ms_io_;  // timeouts as text for messages

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  Acceptor acceptor_;
  std::uint16_t port_ = 0;
  Counters counters_;
  LinkEnv env_;

  // Links by peer rank; only touched on the I/O thread (and after it stopped).
  std::map<int, std::unique_ptr<Link>> out_links_, in_links_;
  Link* out_ = nullptr;  // to the successor; set once before phase_ becomes connected
  Link* in_ = nullptr;   // from the predecessor

  // Connect phase (I/O thread).
  Socket dial_socket_, accept_socket_;
  asio::steady_timer connect_timer_, backoff_timer_;
  bool connect_aborted_ = false, connect_timed_out_ = false;
  int ignored_connections_ = 0;
  std::string last_ignored_;

  // Shared between caller threads and the I/O thread.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::idle;
  int connect_tasks_left_ = 0;
  std::string failure_;  // first fatal cause, with the rank prefix

  std::thread io_thread_;
  bool io_joined_ = false;
  std::atomic<bool> io_running_{false};
  std::atomic<double> io_cpu_final_{0.0};
};

}  // namespace ringattn::net::tcp
