// One established, authenticated connection to a peer rank, after the handshake.
//
// A link carries data in one direction only: an `out` link sends this rank's frames to
// the peer, an `in` link receives the peer's frames. Both directions carry control
// frames: PING keep-alives (net/liveness.hpp), and BYE or ERROR when a side leaves, so a
// neighbour that gives up can say why. Everything here runs on the transport's single
// I/O thread; posted ops arrive through post().
//
// Two coroutines per link. The writer sends the posted data frames (out links) in
// kIoChunkBytes writes and, whenever the link has been quiet for a keep-alive interval,
// a PING with this rank's progress. The reader reads every frame the peer sends: PINGs
// and data headers as they come (each header validated before any payload byte is
// read), and a DATA payload into the posted receive that names its tag, with a running
// CRC32C; a frame whose tag no receive names waits at the sender while nothing is
// posted, and is held (bounded) while receives for other tags are (transport.hpp).
// Everything read is recorded in the link's PeerLiveness, which wait() consults.
// Socket errors stay error codes here; the first one is handed to the transport's fail
// callback, which turns it into the cause every pending request reports.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/liveness.hpp"
#include "net/pending_op.hpp"
#include "net/tcp/stream.hpp"
#include "net/wire.hpp"

namespace ringattn::net::tcp {

struct Counters {
  std::atomic<std::uint64_t> bytes_sent{0}, bytes_received{0}, frames_sent{0}, frames_received{0};
};

// What a link needs from its transport.
struct LinkEnv {
  FrameLimits limits;
  std::chrono::milliseconds linger{1000};     // bound on writing the final BYE/ERROR
  // Bound on waiting at close for the peer to acknowledge this link's last bytes (a slow
  // link holds megabytes in the socket): while they move, up to this; stalled, linger.
  std::chrono::milliseconds flush{1000};
  std::chrono::milliseconds keepalive{1000};  // a quiet link sends a PING this often
  // The first fatal error of any link: abort everything. `origin` is the rank the
  // failure is attributed to.
  std::function<void(FailureCause cause, int origin, const std::string& message)> fail;
  Counters* counters = nullptr;  // [world]: what the links to each peer rank moved (the transport sums them)
  Liveness* liveness = nullptr;  // this rank's: sent in PINGs, ticked per frame moved
  // A peer's PING asked to leave (I/O thread).
  std::function<void(int peer)> peer_leaving;
  // Frames no posted receive names yet: at most this many bytes per link, and the
  // caller's rules (TransportConfig::conflict, tag_name; either may be empty).
  std::uint64_t max_held_bytes = 0;
  std::function<std::string(const Tag& waiting, const Tag& arrived)> conflict;
  std::function<std::string(const Tag& tag)> tag_name;
};

class Link {
 public:
  enum class Dir : std::uint8_t { out, in };

  // `peer_name` says who the peer is in messages: "successor rank 1", "rank 3".
  Link(Stream stream, Dir dir, int self_rank, int peer_rank, std::string peer_name, LinkEnv& env);
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  void start();  // spawns the reader and writer

  // Queues a send (out link) or a receive (in link). Completes it with an error at once
  // if the link is closing.
  void post(std::shared_ptr<PendingOp> op);

  // Sends a PING now rather than when the link next falls quiet (this rank's liveness
  // changed in a way the peer should hear at once: it asks to leave).
  void ping_now();

  // Ends the link: completes every pending op with `cause`; if the stream is at a frame
  // boundary sends ERROR(error) — or BYE when `error` is empty — bounded by env.linger,
  // shuts down the send side, discards unread input and closes. Idempotent.
  void shutdown(const std::string& cause, const std::optional<ErrorInfo>& error);

  bool closed() const { return closed_; }
  int peer_rank() const { return peer_rank_; }
  Dir dir() const { return dir_; }
  const std::string& name() const { return name_; }  // "rank 0 (a:p) -> rank 1 (b:q)"
  const std::string& peer() const { return peer_name_; }  // "successor rank 1", "rank 3"
  const PeerLiveness& liveness() const { return peer_live_; }  // any thread

 private:
  enum class State : std::uint8_t { open, closing };

  Counters& counts() { return env_.counters[peer_rank_]; }  // this peer's

  asio::awaitable<void> writer();
  asio::awaitable<bool> write_frame(const FrameHeader& h, const Payload& payload);
  asio::awaitable<void> reader();
  asio::awaitable<std::optional<FrameHeader>> read_header();
  asio::awaitable<bool> on_frame(const FrameHeader& h);
  asio::awaitable<void> on_error(const FrameHeader& h);
  asio::awaitable<bool> on_data(const FrameHeader& h);
  asio::awaitable<bool> read_payload(const FrameHeader& h, std::span<std::byte> into);
  asio::awaitable<bool> hold(const FrameHeader& h);
  bool deliver_held(PendingOp& op);  // false: nothing held for its tag
  bool refuse_conflict(const Tag& waiting, const Tag& arrived);
  std::string name_of(const Tag& t) const;
  asio::awaitable<bool> read_small(std::span<std::byte> into, const FrameHeader& h);
  asio::awaitable<void> linger_close(std::optional<ErrorInfo> error);
  asio::awaitable<void> flush_sent(std::vector<std::byte>& scratch);
  // Reads and drops up to `reads` buffers of what the peer sent (the socket non-blocking);
  // returns the bytes; ec: would_block once nothing is left, or the socket's error.
  std::size_t discard_unread(std::vector<std::byte>& scratch, int reads, std::error_code& ec);
  void report(const std::string& context, const std::error_code& ec);
  void fail(FailureCause cause, const std::string& message) { env_.fail(cause, peer_rank_, message); }
  void spawn(asio::awaitable<void> coroutine);  // an exception escaping it fails the transport

  Stream stream_;
  Dir dir_;
  int self_rank_, peer_rank_;
  LinkEnv& env_;
  asio::steady_timer writer_wake_, reader_wake_;  // cancelled to wake a coroutine
  std::deque<std::shared_ptr<PendingOp>> ops_;
  struct Held {
    FrameHeader header;
    std::vector<std::byte> payload;
  };
  std::deque<Held> held_;  // in link: frames that came before a receive named them
  std::uint64_t held_bytes_ = 0;
  State state_ = State::open;
  bool closed_ = false;
  bool bye_received_ = false;
  std::uint64_t frame_written_ = 0, frame_total_ = 0;  // the frame the writer is in
  std::chrono::steady_clock::time_point last_write_;
  bool ping_now_ = false;
  PeerLiveness peer_live_;
  std::string peer_name_, name_;
};

}  // namespace ringattn::net::tcp
