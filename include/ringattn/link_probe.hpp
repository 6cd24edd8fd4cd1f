// ringattn/link_probe.hpp — one link of the ring, measured.
//
// A LinkProbe is one end of a two-rank link on the ring's own transport (TCP, TLS 1.3
// when asked, the same handshake, frames, limits and I/O thread as Ring's links): rank 0
// streams K/V-sized blocks to rank 1 the way the ring moves them — `depth` frames in
// flight (2 is the ring's double buffering), the sender passing a known CRC32C as a
// relaying rank does, the receiver checking it on every frame into `depth` always-posted
// buffers. `ringattn bench transport` times it against plain TCP and iperf3. It is an
// instrument for the links a ring would run on, not a way to move data (Ring is that).
//
//   LinkProbe end(options);                  // listens
//   end.connect({rank0_address, rank1_address});
//   rank 0: end.send(block_bytes, count, seconds)    rank 1: end.receive(block_bytes)
//
// Both ends must stream the same block sizes in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringattn/launch.hpp"

namespace ringattn {

struct LinkProbeOptions {
  int rank = 0;  // 0 sends, 1 receives
  std::string host = "127.0.0.1";  // the address this end listens on
  std::uint16_t port = 0;          // 0: any free port (listen_port())
  std::string token;               // the shared secret, the same on both ends
  bool tls = false;
  std::uint64_t max_block_bytes = std::uint64_t{32} << 20;  // the largest block streamed (frame limit, buffers)
  int depth = 2;                   // frames in flight / receive buffers posted, 1..kMaxLinkProbeDepth
  double connect_timeout = 30;     // seconds for connect(), in (0, 1e6]
  double timeout = 30;             // seconds of silence any wait tolerates, in (0, 1e6]
};

// The most frames a LinkProbe keeps in flight: rank 1 holds a buffer of max_block_bytes
// for each.
inline constexpr int kMaxLinkProbeDepth = 64;

// K and V of one token in the probe's blocks (one KV head of 128, fp32): block sizes are
// multiples of this.
inline constexpr std::uint64_t kLinkProbeRowBytes = 2 * 128 * 4;

// How the ring's links use their sockets, for a baseline that should do the same: the
// kernel's send and receive buffers (set before connect and listen) and the bytes per
// write and per read system call.
struct LinkSocketSettings {
  static constexpr int buffer_bytes = 4 << 20;
  static constexpr std::size_t write_chunk_bytes = std::size_t{2} << 20;
  static constexpr std::size_t read_chunk_bytes = std::size_t{256} << 10;
};

struct LinkStream {
  std::uint64_t frames = 0;
  double seconds = 0;         // receiver: from the first frame's arrival to the last's; sender: the whole stream
  double io_cpu_seconds = 0;  // of the transport's I/O thread over the same span (CRC32C included)
};

class LinkProbe {
 public:
  // Listens; throws NetworkError naming the address if it cannot, InvalidArgument for bad
  // options (rank not 0 or 1, depth outside 1..kMaxLinkProbeDepth, a timeout outside
  // (0, 1e6] seconds, a block size that is not a multiple of kLinkProbeRowBytes).
  explicit LinkProbe(const LinkProbeOptions& options);
  ~LinkProbe();
  LinkProbe(const LinkProbe&) = delete;
  LinkProbe& operator=(const LinkProbe&) = delete;

  std::uint16_t listen_port() const;
  // Connects to the other end; `ends` are both ends' addresses in rank order (this end's
  // own included, as it listens).
  void connect(const std::vector<HostPort>& ends);

  // Rank 0: one stream of blocks of `block_bytes` K/V bytes — `count` frames (at least 2),
  // or with count 0 frames for `seconds` (at least 2; seconds in (0, 1e6]) — its last
  // frame marked. InvalidArgument for a negative count.
  LinkStream send(std::uint64_t block_bytes, std::int64_t count, double seconds);
  // Rank 1: one stream, up to the marked last frame; throws NetworkError for a frame of
  // another size.
  LinkStream receive(std::uint64_t block_bytes);

  // Says goodbye and releases the link; a receiver's buffers still posted end quietly.
  // Idempotent; unblocks the other end's waits.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringattn
