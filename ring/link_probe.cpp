// LinkProbe (ringattn/link_probe.hpp): a stream of frames the size of K/V blocks on a two-rank transport.
#include "ringattn/link_probe.hpp"

#include <algorithm>
#include <chrono>
#include <deque>

#include "net/crc32c.hpp"
#include "net/tcp/socket_options.hpp"
#include "net/transport.hpp"
#include "ringattn/error.hpp"
#include "ring/block_layout.hpp"
#include "ring/frame_tags.hpp"
#include "ring/timeouts.hpp"

namespace ringattn {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kHeadDim = 128;  // one K/V head of 128, fp32: kLinkProbeRowBytes per row
constexpr std::uint64_t kLastOfStream = 1;  // the tag's call of a stream's last frame (0 otherwise)
static_assert(kLinkProbeRowBytes == 2 * kHeadDim * 4);
static_assert(LinkSocketSettings::buffer_bytes == net::tcp::kSocketBufferBytes);
static_assert(LinkSocketSettings::write_chunk_bytes == net::tcp::kIoChunkBytes);
static_assert(LinkSocketSettings::read_chunk_bytes == net::tcp::kReadChunkBytes);

std::uint32_t rows_of(std::uint64_t block_bytes, const std::string& where) {
  if (block_bytes < kLinkProbeRowBytes || block_bytes % kLinkProbeRowBytes != 0 ||
      block_bytes / kLinkProbeRowBytes > 0xFFFFFFFFull)
    throw InvalidArgument(where + ": block sizes must be positive multiples of " + std::to_string(kLinkProbeRowBytes) +
                          " bytes, got " + std::to_string(block_bytes));
  return static_cast<std::uint32_t>(block_bytes / kLinkProbeRowBytes);
}

std::uint64_t frame_bytes(std::uint64_t block_bytes) {
  return ring::BlockLayout::kv(DType::f32, kHeadDim, rows_of(block_bytes, "LinkProbe"), false).bytes();
}

}  // namespace

struct LinkProbe::Impl {
  LinkProbeOptions o;
  // The receiver's `depth` buffers, each always posted; declared before the transport so
  // they outlive its close(), which is what ends the receives still posted at the end.
  std::vector<std::vector<std::byte>> bufs;
  std::vector<net::Request> posted;
  std::size_t next = 0;
  std::uint64_t frames = 0;  // the step of the next frame sent (rank 0) or receive posted (rank 1)
  std::unique_ptr<net::Transport> t;
  net::Request post_receive(std::vector<std::byte>& buf) {
    return t->irecv(t->predecessor(), {ring::kLinkProbe, net::kAnyCall, frames++}, buf);
  }
};

LinkProbe::LinkProbe(const LinkProbeOptions& options) : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.o = options;
  if (options.rank != 0 && options.rank != 1) throw InvalidArgument("LinkProbe: rank must be 0 (sends) or 1 (receives)");
  if (options.depth < 1 || options.depth > kMaxLinkProbeDepth)
    throw InvalidArgument("LinkProbe: depth = " + std::to_string(options.depth) + " must be in 1.." +
                          std::to_string(kMaxLinkProbeDepth) + " (frames in flight, each a receive buffer)");
  const auto connect_timeout = ring::timeout_ms(options.connect_timeout, "LinkProbe: connect_timeout");
  const auto io_timeout = ring::timeout_ms(options.timeout, "LinkProbe: timeout");
  net::TransportConfig c;
  c.tls = options.tls;
  c.rank = options.rank;
  c.world = 2;
  c.ring_id = 0xBE7C4;
  c.limits.fields = {1, 1, kHeadDim, rows_of(options.max_block_bytes, "LinkProbe max_block_bytes")};
  c.limits.max_payload = frame_bytes(options.max_block_bytes);
  c.secret = options.token;
  c.listen_host = options.host;
  c.listen_port = options.port;
  c.connect_timeout = connect_timeout;
  c.io_timeout = io_timeout;
  im.t = net::make_tcp_transport(c);
  if (options.rank == 1)
    im.bufs.assign(static_cast<std::size_t>(options.depth), std::vector<std::byte>(frame_bytes(options.max_block_bytes)));
}

LinkProbe::~LinkProbe() { close(); }

std::uint16_t LinkProbe::listen_port() const { return impl_->t->listen_port(); }

void LinkProbe::connect(const std::vector<HostPort>& ends) {
  if (ends.size() != 2) throw InvalidArgument("LinkProbe::connect: two addresses (rank 0's, rank 1's)");
  std::vector<net::PeerAddress> peers;
  for (const auto& e : ends) peers.push_back({e.host, e.port});
  auto& im = *impl_;
  im.t->connect(peers);
  for (auto& b : im.bufs) im.posted.push_back(im.post_receive(b));
}

LinkStream LinkProbe::send(std::uint64_t block_bytes, std::int64_t count, double seconds) {
  auto& im = *impl_;
  if (im.o.rank != 0) throw InvalidArgument("LinkProbe::send: only rank 0 sends");
  rows_of(block_bytes, "LinkProbe::send");  // throws for a size that is no whole number of rows
  if (block_bytes > im.o.max_block_bytes) throw InvalidArgument("LinkProbe::send: a block over max_block_bytes");
  if (count < 0) throw InvalidArgument("LinkProbe::send: count = " + std::to_string(count) + " must be >= 0");
  if (count == 0) ring::timeout_ms(seconds, "LinkProbe::send: seconds");  // a stream's length: the same range
  std::vector<std::byte> payload(frame_bytes(block_bytes));
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = std::byte(static_cast<unsigned char>(i * 131 + 7));
  const std::uint32_t crc = net::crc32c(payload);  // known, as for a relayed block
  const double cpu0 = im.t->stats().io_cpu_seconds;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(seconds);
  std::deque<net::Request> inflight;
  std::uint64_t step = 0;
  for (bool last = false; !last; ++step) {
    last = count > 0 ? step + 1 >= static_cast<std::uint64_t>(std::max<std::int64_t>(count, 2))
                     : step >= 1 && Clock::now() >= deadline;
    const net::Tag tag{ring::kLinkProbe, last ? kLastOfStream : 0, im.frames++};
    inflight.push_back(im.t->isend(im.t->successor(), tag, payload, crc));
    if (static_cast<int>(inflight.size()) >= im.o.depth) {
      im.t->wait(inflight.front());
      inflight.pop_front();
    }
  }
  for (auto& r : inflight) im.t->wait(r);
  return {step, std::chrono::duration<double>(Clock::now() - t0).count(), im.t->stats().io_cpu_seconds - cpu0};
}

LinkStream LinkProbe::receive(std::uint64_t block_bytes) {
  auto& im = *impl_;
  if (im.o.rank != 1) throw InvalidArgument("LinkProbe::receive: only rank 1 receives");
  const std::uint64_t want = frame_bytes(block_bytes);
  Clock::time_point first{};
  double cpu0 = 0;
  LinkStream s;
  for (bool last = false; !last;) {
    const net::FrameHeader h = im.t->wait(im.posted[im.next]);
    if (h.payload_bytes != want)
      throw NetworkError("LinkProbe: rank 1 got a frame of " + std::to_string(h.payload_bytes) + " bytes where blocks of " +
                         std::to_string(block_bytes) + " make frames of " + std::to_string(want) +
                         " (do both ends stream the same sizes?)", FailureCause::protocol);
    last = h.tag.call == kLastOfStream;
    if (++s.frames == 1) {
      first = Clock::now();
      cpu0 = im.t->stats().io_cpu_seconds;
    }
    // The last frame's buffer is re-posted too: the next stream flows into it.
    im.posted[im.next] = im.post_receive(im.bufs[im.next]);
    im.next = (im.next + 1) % im.bufs.size();
  }
  s.seconds = std::chrono::duration<double>(Clock::now() - first).count();
  s.io_cpu_seconds = im.t->stats().io_cpu_seconds - cpu0;
  return s;
}

void LinkProbe::close() {
  if (impl_ && impl_->t) impl_->t->close();
}

}  // namespace ringattn
