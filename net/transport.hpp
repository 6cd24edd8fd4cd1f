// The seam between the schedules (the ring, decode's reductions) and the network:
// non-blocking send/receive of frames to and from any rank into caller-owned memory,
// and a blocking wait with a deadline. Small on purpose (isend / irecv / wait, as in
// NCCL's net plugins) so that an MPI or RDMA backend can sit beside the TCP one in net/
// behind the same calls. Addresses are opaque strings to the schedules; each backend
// parses its own (the TCP backend: "host:port", net/tcp/tcp_transport.hpp).
//
// Typical double-buffered ring step (the transport knows nothing about attention):
//
//   auto t = net::make_tcp_transport(cfg);        // binds + listens at once
//   publish(t->listen_port());                     // however ranks learn each other's ports
//   t->connect(peers);                             // ring links: successor + predecessor
//   for (step = 0; step < world - 1; ++step) {
//     auto s = t->isend(t->successor(), {kBlocks, call, step}, block_a, crc_a);
//     auto r = t->irecv(t->predecessor(), {kBlocks, call, step}, block_b);
//     compute(block_a);                            // overlaps with both transfers
//     t->wait(s);
//     crc_a = t->wait(r).payload_crc;              // relay it next step without recomputing
//     std::swap(block_a, block_b);
//   }
//   t->close();
//
// Links to ranks other than the ring neighbours are made on the first isend to them
// (the receiving side accepts them at any time), authenticated like the ring's.
// Matching: every DATA frame carries a tag (schedule, call, step: net/wire.hpp) and a
// receive names the tag it waits for. Frames from one rank arrive in the order they were
// posted to isend; each goes to the first receive posted for its tag. A frame that no
// posted receive names waits its turn: while nothing at all is posted for its rank it
// stays at the sender (TCP's flow control); while receives for other tags are posted it
// is held in memory (at most max_held_bytes per link) until one names it. The caller's
// `conflict` rule may refuse it instead (a frame that cannot belong to the exchange the
// receiver is in: the ranks have diverged), failing the transport with that reason.
// Lifetime: a payload or buffer must stay alive and untouched until wait() on its
// request has returned or thrown, or close() returned.
//
// Deadlines measure silence, not work (net/liveness.hpp): wait() fails when the peer it
// waits on has sent nothing for io_timeout (silent), or its progress counter has not
// moved for io_timeout (stalled). A peer whose kernel computes for ten times the timeout
// but ticks liveness().counter() is waited for. Callers mark their long computations
// with liveness().enter(PeerState::busy) and let the kernel tick the counter.
//
// Failure: any error (silence, stall, peer closed, bad frame, bad CRC) is fatal for the
// whole transport. It is reported by wait() as NetworkError naming this rank, the peer
// rank and the cause, with cause() and origin_rank() set; every other pending or later
// request fails with the same cause, and the peers are sent an ERROR frame carrying it
// and its origin, so the whole ring reports the first cause, not the reactions to it.
#pragma once

#include <array>
#include <concepts>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/liveness.hpp"
#include "net/wire.hpp"

namespace ringattn::net {

struct PeerAddress {
  std::string host;  // numeric address or name
  std::uint16_t port = 0;
  std::string text() const;  // "host:port" ("[v6]:port")
};
// "host:port" or "[v6]:port"; throws InvalidArgument naming `what`.
PeerAddress parse_peer_address(const std::string& text, const std::string& what);
// The numeric address of `host` (a name is resolved, first answer): where a rank binds so
// that it listens where its peers will dial it. Throws InvalidArgument naming `what`.
std::string numeric_host(const std::string& host, const std::string& what);

struct TransportConfig {
  int rank = 0;
  int world = 1;
  std::uint64_t ring_id = 0;   // identifies this ring/job; peers with another ring id are refused
  LinkLimits limits;           // compared in the handshake; bound every incoming frame
  std::string secret;          // shared secret bytes (net/secret.hpp); required when world > 1
  // Encryption in transit: every connection runs TLS 1.3 keyed by the secret (a PSK, no
  // certificates; net/tcp/tls.hpp) before the handshake. Both ends must agree.
  bool tls = false;
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;  // 0 = any free port, see listen_port()
  std::chrono::milliseconds connect_timeout{10000};  // whole connect(): dial retries, accept, handshakes
  std::chrono::milliseconds io_timeout{30000};       // silence or stall of the awaited peer in wait()
  // One incoming or outgoing handshake (0: min(5 s, connect_timeout)). An idle or
  // garbage connection is dropped after this, while other connections are served.
  std::chrono::milliseconds handshake_timeout{0};
  // A link quiet for this long sends a keep-alive (0: io_timeout / 5, within 10 ms..2 s).
  std::chrono::milliseconds keepalive{0};
  // Links between every pair of ranks, opened by connect() (it returns once all are up),
  // for schedules that talk to every rank (all-to-all): no handshake then runs while a
  // collective does, so a failure meets established links and reaches every rank with its
  // cause. Otherwise only the ring's links, others on the first isend to them.
  bool all_pairs = false;
  // Bytes of frames held per link for tags no posted receive names yet (0: 2 x the
  // negotiated max_payload). More fails the transport, naming the tags.
  std::uint64_t max_held_bytes = 0;
  // The caller's rule (optional): "" when `arrived` may be held while a receive waits for
  // `waiting`, else why it cannot (the transport fails with that, as a protocol error).
  std::function<std::string(const Tag& waiting, const Tag& arrived)> conflict;
  // The caller's name of a tag in messages (optional; else net::to_string(tag)).
  std::function<std::string(const Tag& tag)> tag_name;
};

struct TransportStats {
  std::uint64_t bytes_sent = 0;      // on the wire: headers and payloads, data and control frames
  std::uint64_t bytes_received = 0;
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;
  double io_cpu_seconds = 0;         // CPU time of the I/O thread (CLOCK_THREAD_CPUTIME_ID),
                                     // including CRC32C: the CPU cost of moving the bytes
  struct Link {
    int peer = 0;
    std::uint64_t bytes_sent = 0, bytes_received = 0;
  };
  std::vector<Link> links;  // the bytes above by peer rank, ascending: those with any
};

// A send's payload: one span, or up to three laid end to end on the wire (a block's
// description from one buffer and its K and V straight from the caller's arrays, so a
// rank's own block is sent without first being copied together). Converts from a span.
struct Payload {
  static constexpr std::size_t kMaxParts = 3;
  std::array<std::span<const std::byte>, kMaxParts> parts{};

  Payload() = default;
  Payload(std::span<const std::byte> one) : parts{one} {}  // NOLINT: implicit on purpose
  template <class Bytes>  // a std::vector<std::byte>, std::array, ...: as its span
    requires std::convertible_to<const Bytes&, std::span<const std::byte>>
  Payload(const Bytes& bytes) : parts{std::span<const std::byte>(bytes)} {}  // NOLINT
  Payload(std::span<const std::byte> a, std::span<const std::byte> b, std::span<const std::byte> c = {})
      : parts{a, b, c} {}
  std::size_t size() const { return parts[0].size() + parts[1].size() + parts[2].size(); }
};

// Backends derive their per-request state from this.
struct RequestState {
  virtual ~RequestState() = default;
};

// Opaque handle of a posted isend/irecv; cheap to copy. Default-constructed = empty.
class Request {
 public:
  Request() = default;
  explicit Request(std::shared_ptr<RequestState> state) : state_(std::move(state)) {}
  bool valid() const noexcept { return state_ != nullptr; }
  RequestState* state() const noexcept { return state_.get(); }

 private:
  std::shared_ptr<RequestState> state_;
};

class Transport {
 public:
  virtual ~Transport() = default;  // closes (politely, bounded) if still open

  virtual int rank() const = 0;
  virtual int world() const = 0;
  int successor() const { return (rank() + 1) % world(); }
  int predecessor() const { return (rank() + world() - 1) % world(); }
  // The rank that rank r of this transport is on the whole ring: r itself, or for a group
  // of the ring's ranks (group_transport.hpp) its member's. Messages name ranks by it.
  virtual int ring_rank(int r) const { return r; }

  // The bound port, valid right after construction (the socket already listens);
  // 0 when world == 1 (no socket at all).
  virtual std::uint16_t listen_port() const = 0;

  // peers[r] is rank r's address (this rank's own entry is ignored). Connects to the
  // successor (and with all_pairs to every rank) (retrying with back-off until connect_timeout) and waits for the
  // predecessor's connection (accepted and authenticated from construction on, so a
  // predecessor may connect first), HELLO + mutual HMAC auth on both. Links to other
  // ranks are made later, on demand. Throws NetworkError naming this rank, the peer
  // rank/address and the cause (timeout, refused, which HELLO field differs,
  // authentication failed, and the connections that were dropped meanwhile).
  // world == 1: no-op. world == 2: two connections, one per direction, so sending and
  // receiving never share a socket.
  virtual void connect(const std::vector<PeerAddress>& peers) = 0;

  // Posts a DATA frame of `tag` (schedule >= 1) to rank `to` (not this rank, except in a
  // world of one). The transport fills in payload_bytes (= payload.size()) and
  // payload_crc: pass `crc` when the payload's CRC32C is already known (e.g. relaying a
  // received block: wait(recv).payload_crc), otherwise it is computed on the I/O thread.
  // Throws InvalidArgument if the frame does not fit the limits.
  virtual Request isend(int to, const Tag& tag, Payload payload, std::optional<std::uint32_t> crc = {}) = 0;

  // Posts the receive of the frame of `tag` from rank `from` (tag.call may be kAnyCall)
  // into `buffer`. The header is validated against the limits and buffer.size() before
  // any payload byte is read; the payload CRC32C is checked after.
  virtual Request irecv(int from, const Tag& tag, std::span<std::byte> buffer) = 0;

  // The same, but the buffer is asked for once the frame's header has arrived and been
  // validated (on the transport's I/O thread; it must not block): a receiver that does
  // not know how large the frame is sizes its buffer to what actually comes, within the
  // limits. An empty span refuses the frame (the transport fails, naming it).
  using BufferFor = std::function<std::span<std::byte>(const FrameHeader& header)>;
  virtual Request irecv(int from, const Tag& tag, BufferFor buffer_for) = 0;

  // Blocks until the request completes or its peer falls silent or stalls (io_timeout).
  // Returns the frame header (for a receive: as received, payload_bytes says how much of
  // the buffer was filled). Throws NetworkError naming this rank, the peer and the
  // cause. Calling it again on a completed request returns the same header.
  virtual FrameHeader wait(Request& request) = 0;

  // Non-blocking: true once the request has completed (wait() then returns at once).
  virtual bool test(const Request& request) const = 0;

  virtual TransportStats stats() const = 0;

  // This rank's progress counter and state, sent to the peers in keep-alives.
  virtual Liveness& liveness() = 0;

  // A drain: this rank asks to leave once its peers let it. Every link sends a PING at
  // once, and every later one, saying so; nothing else changes (frames still flow).
  virtual void announce_leaving() = 0;
  // The peers whose PING asked to leave (ascending ranks; any thread).
  virtual std::vector<int> leaving_peers() const = 0;

  // The first failure, empty while the transport is healthy.
  virtual std::string failure() const = 0;

  // Fails the transport from above (a schedule found a frame it cannot accept): the
  // peers get ERROR with this cause and origin, every request fails with it.
  virtual void abort(FailureCause cause, int origin, const std::string& message) = 0;

  // Sends BYE to the peers, fails still-pending requests ("closed"), waits a bounded time
  // for the peers to close, stops the I/O thread. Idempotent; never hangs.
  virtual void close() = 0;
};

// The TCP backend (net/tcp/). world == 1 gives an in-memory transport without sockets.
// Throws InvalidArgument for a bad config, NetworkError if it cannot bind/listen.
std::unique_ptr<Transport> make_tcp_transport(const TransportConfig& config);

}  // namespace ringattn::net
