// One established, authenticated TCP connection to a ring neighbour, after the handshake.
//
// A link carries data in one direction only: an `out` link sends this rank's frames to
// the peer, an `in` link receives the peer's frames. The reverse direction carries only
// control frames (BYE, ERROR), so a neighbour that gives up can say why. Everything here
// runs on the transport's single I/O thread; posted ops arrive through post().
//
// Two coroutines per link: the writer (out links) drains the send queue frame by frame
// in kIoChunkBytes writes; the reader serves posted receives (in links) — header first,
// validated before any payload byte is read, then the payload into the caller's buffer
// with a running CRC32C — or, on out links, watches for the peer's BYE/ERROR/EOF.
// Socket errors stay error codes here; the first one is handed to the transport's fail
// callback, which turns it into the message every pending request reports.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "net/pending_op.hpp"
#include "net/tcp/socket_options.hpp"
#include "net/wire.hpp"

namespace ringattn::net::tcp {

struct Counters {
  std::atomic<std::uint64_t> bytes_sent{0}, bytes_received{0}, frames_sent{0}, frames_received{0};
};

// What a link needs from its transport.
struct LinkEnv {
  FrameLimits limits;
  std::chrono::milliseconds linger{1000};         // bound on writing the final BYE/ERROR
  std::function<void(const std::string&)> fail;  // first fatal error of any link: abort everything
  Counters* counters = nullptr;
};

class Link {
 public:
  enum class Dir : std::uint8_t { out, in };

  Link(Socket socket, Dir dir, int self_rank, int peer_rank, LinkEnv& env);
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  void start();  // spawns the reader and writer

  // Queues a send (out link) or a receive (in link). Completes it with an error at once
  // if the link is closing.
  void post(std::shared_ptr<PendingOp> op);

  // Ends the link: completes every pending op with `cause`; if the stream is at a frame
  // boundary sends ERROR(error_text), or BYE when error_text is empty (bounded by
  // env.linger), shuts down the send side, discards unread input and closes. Idempotent.
  void shutdown(const std::string& cause, const std::string& error_text);

  bool closed() const { return closed_; }
  int peer_rank() const { return peer_rank_; }
  Dir dir() const { return dir_; }
  const std::string& name() const { return name_; }  // "rank 0 -> rank 1 (a:p -> b:q)"

 private:
  enum class State : std::uint8_t { open, closing };

  asio::awaitable<void> writer();
  asio::awaitable<void> reader();
  asio::awaitable<bool> read_payload(const FrameHeader& h, PendingOp& op);
  asio::awaitable<void> linger_close(std::string error_text);
  void report(const std::string& context, const std::error_code& ec);
  void spawn(asio::awaitable<void> coroutine);  // an exception escaping it fails the transport
  std::string peer() const;  // "successor rank 1" / "predecessor rank 3"

  Socket socket_;
  Dir dir_;
  int self_rank_, peer_rank_;
  LinkEnv& env_;
  asio::steady_timer wake_;  // cancelled to wake the coroutine waiting for posted ops
  std::deque<std::shared_ptr<PendingOp>> ops_;
  State state_ = State::open;
  bool closed_ = false;
  bool bye_received_ = false;
  std::uint64_t frame_written_ = 0, frame_total_ = 0;  // the frame the writer is in
  std::string name_;
};

}  // namespace ringattn::net::tcp
