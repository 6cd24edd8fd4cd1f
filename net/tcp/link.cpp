// A connection's reader and writer coroutines (see link.hpp).
#include "net/tcp/link.hpp"

#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <array>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <cstdio>
#include <vector>

#include "net/crc32c.hpp"
#include "net/tcp/control_io.hpp"
#include "net/tcp/coroutines.hpp"
#include "net/tcp/stream_deadline.hpp"
#include "net/tcp/tls.hpp"

namespace ringattn::net::tcp {
namespace {

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

constexpr auto kAwait = asio::use_awaitable;
using Clock = std::chrono::steady_clock;

}  // namespace

Link::Link(Stream stream, Dir dir, int self_rank, int peer_rank, std::string peer_name, LinkEnv& env)
    : stream_(std::move(stream)),
      dir_(dir),
      self_rank_(self_rank),
      peer_rank_(peer_rank),
      env_(env),
      writer_wake_(stream_.get_executor(), asio::steady_timer::time_point::max()),
      reader_wake_(stream_.get_executor(), asio::steady_timer::time_point::max()),
      last_write_(Clock::now()),
      peer_name_(std::move(peer_name)) {
  const std::string a = "rank " + std::to_string(self_rank) + " (" + stream_.endpoint_text(false) + ")";
  const std::string b = "rank " + std::to_string(peer_rank) + " (" + stream_.endpoint_text(true) + ")";
  name_ = dir == Dir::out ? a + " -> " + b : b + " -> " + a;
  if (TlsStream* tls = stream_.tls()) name_ += " [" + tls_describe(tls->native_handle()) + "]";
}

void Link::start() {
  spawn(writer());
  spawn(reader());
}

void Link::post(std::shared_ptr<PendingOp> op) {
  op->live = &peer_live_;
  if (state_ != State::open) {
    op->complete("the link to " + peer() + " is closed");
    return;
  }
  ops_.push_back(op);  // first: a failure below completes it with the rest
  if (dir_ == Dir::in) {
    for (const Held& f : held_)
      if (!matches(op->tag, f.header.tag) && !refuse_conflict(op->tag, f.header.tag)) return;
    if (deliver_held(*op)) {
      if (const auto it = std::find(ops_.begin(), ops_.end(), op); it != ops_.end()) ops_.erase(it);
      return;
    }
  }
  if (dir_ == Dir::out && bye_received_) {  // fails the op just queued, with the rest
    fail(FailureCause::peer_closed, "cannot send to " + peer() + ": it has closed the ring (BYE)");
    return;
  }
  (dir_ == Dir::out ? writer_wake_ : reader_wake_).cancel();
}

void Link::ping_now() {
  if (state_ != State::open) return;
  ping_now_ = true;
  writer_wake_.cancel();
}

void Link::report(const std::string& context, const std::error_code& ec) {
  if (state_ != State::open) return;  // we are closing: errors are expected
  if (bye_received_ && ops_.empty()) return;  // the peer said goodbye and is gone: nothing was lost
  if (ec == asio::error::eof)
    fail(FailureCause::peer_closed, peer() + " closed the connection (EOF) " + context);
  else
    fail(FailureCause::peer_closed, "connection to " + peer() + " failed " + context + ": " + ec.message());
}

void Link::spawn(asio::awaitable<void> coroutine) {
  asio::co_spawn(stream_.get_executor(), std::move(coroutine), [this](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      fail(FailureCause::local, std::string("internal error on the link to ") + peer() + ": " + ex.what());
    }
  });
}

// ---- writing ----------------------------------------------------------------------------------

asio::awaitable<bool> Link::write_frame(const FrameHeader& h, const Payload& payload) {
  // An in link only reads data: if its peer is gone, the frames it sent are still in our
  // receive buffer, and the reader reports the end when it gets there. So a keep-alive
  // that cannot be written back on it is no failure; on an out link it is.
  const bool fatal = dir_ == Dir::out;
  std::error_code ec;
  const HeaderBytes hb = encode_header(h);
  frame_total_ = kHeaderBytes + payload.size();
  frame_written_ = 0;
  while (frame_written_ < frame_total_) {
    // One gathered write of what is left of the header and the payload's parts, at most
    // kIoChunkBytes of payload at a time.
    std::array<asio::const_buffer, 1 + Payload::kMaxParts> bufs;
    std::size_t nbufs = 0;
    if (frame_written_ < kHeaderBytes) bufs[nbufs++] = asio::buffer(hb.data() + frame_written_, kHeaderBytes - frame_written_);
    std::size_t skip = frame_written_ > kHeaderBytes ? frame_written_ - kHeaderBytes : 0, room = kIoChunkBytes;
    for (const auto& part : payload.parts) {
      if (skip >= part.size()) {
        skip -= part.size();
        continue;
      }
      const std::size_t n = std::min(part.size() - skip, room);
      if (n == 0) break;
      bufs[nbufs++] = asio::buffer(part.data() + skip, n);
      skip = 0;
      room -= n;
    }
    const std::size_t n = co_await stream_.async_write_some(std::span<const asio::const_buffer>(bufs.data(), nbufs),
                                                            asio::redirect_error(kAwait, ec));
    if (state_ != State::open) co_return false;
    if (ec) {
      if (fatal) report("while sending", ec);
      co_return false;
    }
    frame_written_ += n;
    last_write_ = Clock::now();
  }
  counts().bytes_sent += frame_total_;
  counts().frames_sent += 1;
  co_return true;
}

asio::awaitable<void> Link::writer() {
  std::error_code ec;
  while (state_ == State::open) {
    if (dir_ == Dir::out && !ops_.empty()) {
      std::shared_ptr<PendingOp> op = ops_.front();
      if (op->crc_pending) {
        std::uint32_t crc = 0;
        for (const auto& part : op->payload.parts) crc = crc32c(crc, part);
        op->header.payload_crc = crc;
        op->crc_pending = false;
      }
      if (!co_await write_frame(op->header, op->payload)) co_return;
      ops_.pop_front();
      env_.liveness->tick();
      op->complete();
      continue;
    }
    if (bye_received_) co_return;  // the peer is leaving: nobody to keep alive for
    const auto due = last_write_ + env_.keepalive;
    if (ping_now_ || Clock::now() >= due) {  // quiet for a keep-alive interval: tell the peer we live
      ping_now_ = false;
      const auto payload = encode_ping(env_.liveness->snapshot());
      if (!co_await write_frame(control_header(FrameKind::ping, payload), payload)) co_return;
      continue;
    }
    writer_wake_.expires_at(due);
    co_await writer_wake_.async_wait(asio::redirect_error(kAwait, ec));
  }
}

// ---- reading ----------------------------------------------------------------------------------

asio::awaitable<bool> Link::read_small(std::span<std::byte> into, const FrameHeader& h) {
  std::error_code ec;
  co_await asio::async_read(stream_, asio::buffer(into.data(), into.size()), asio::redirect_error(kAwait, ec));
  if (state_ != State::open) co_return false;
  if (ec) {
    report("in the middle of a " + std::string(to_string(h.kind)) + " frame", ec);
    co_return false;
  }
  counts().bytes_received += into.size();
  counts().frames_received += 1;
  if (crc32c(into) != h.payload_crc) {
    fail(FailureCause::protocol, "payload CRC32C mismatch on a " + std::string(to_string(h.kind)) + " frame from " + peer());
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> Link::read_payload(const FrameHeader& h, std::span<std::byte> into) {
  std::error_code ec;
  std::uint32_t crc = 0;
  std::uint64_t got = 0;
  while (got < h.payload_bytes) {
    std::byte* dst = into.data() + got;
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(h.payload_bytes - got, kReadChunkBytes));
    const std::size_t n = co_await stream_.async_read_some(asio::buffer(dst, want), asio::redirect_error(kAwait, ec));
    if (state_ != State::open) co_return false;  // op already failed; its buffer is no longer ours
    if (ec) {
      report("in the middle of a frame (" + name_of(h.tag) + ", " + std::to_string(got) + " of " +
                 std::to_string(h.payload_bytes) + " payload bytes)",
             ec);
      co_return false;
    }
    peer_live_.advanced();  // data on the move is progress, however long the frame
    crc = crc32c(crc, std::span<const std::byte>(dst, n));  // while the chunk is still in cache
    got += n;
  }
  if (crc != h.payload_crc) {
    fail(FailureCause::protocol, "payload CRC32C mismatch on a frame (" + name_of(h.tag) + ") from " + peer() +
                                     ": header says " + hex32(h.payload_crc) + ", payload has " + hex32(crc));
    co_return false;
  }
  co_return true;
}

// Frames from the peer, one at a time, until the link closes or fails.
asio::awaitable<void> Link::reader() {
  while (state_ == State::open) {
    const std::optional<FrameHeader> h = co_await read_header();
    if (!h || !co_await on_frame(*h)) co_return;
  }
}

// The next header, checked against the ring's limits; nullopt when the reader must stop
// (the link closed, failed, or the peer said goodbye and closed).
asio::awaitable<std::optional<FrameHeader>> Link::read_header() {
  std::error_code ec;
  HeaderBytes hb{};
  co_await asio::async_read(stream_, asio::buffer(hb), asio::redirect_error(kAwait, ec));
  if (state_ != State::open) co_return std::nullopt;
  if (ec) {
    if (ec == asio::error::eof && bye_received_ && ops_.empty()) co_return std::nullopt;  // polite close
    report(dir_ == Dir::in ? "while this rank receives from it" : "while this rank sends to it", ec);
    co_return std::nullopt;
  }
  peer_live_.heard();
  counts().bytes_received += kHeaderBytes;
  FrameHeader h;
  if (std::string err = try_decode_header(hb, env_.limits, h); !err.empty()) {
    fail(FailureCause::protocol, "bad frame header from " + peer() + ": " + err);
    co_return std::nullopt;
  }
  co_return h;
}

// One frame after its header; false when the reader must stop.
asio::awaitable<bool> Link::on_frame(const FrameHeader& h) {
  switch (h.kind) {
    case FrameKind::ping: {
      std::array<std::byte, kPingBytes> payload{};
      if (!co_await read_small(payload, h)) co_return false;
      PingInfo p;
      if (std::string err = try_decode_ping(payload, p); !err.empty()) {
        fail(FailureCause::protocol, "bad PING from " + peer() + ": " + err);
        co_return false;
      }
      peer_live_.ping(p);
      if (p.leaving && env_.peer_leaving) env_.peer_leaving(peer_rank_);
      co_return true;
    }
    case FrameKind::bye:
      bye_received_ = true;
      counts().frames_received += 1;
      if (!ops_.empty()) {
        fail(FailureCause::peer_closed, peer() + " closed the ring (BYE) with " + std::to_string(ops_.size()) + " " +
                                            (dir_ == Dir::in ? "receive(s)" : "send(s)") + " pending");
        co_return false;
      }
      co_return true;  // expect EOF next
    case FrameKind::error:
      co_await on_error(h);
      co_return false;
    case FrameKind::hello:
    case FrameKind::auth:
    case FrameKind::address:
    case FrameKind::peers:
      fail(FailureCause::protocol, "unexpected " + std::string(to_string(h.kind)) + " frame from " + peer() +
                                       " after the handshake");
      co_return false;
    case FrameKind::data: co_return co_await on_data(h);
  }
  co_return false;  // not reached: try_decode_header refuses other kinds
}

// The peer aborted: its ERROR names the cause and the rank it started at.
asio::awaitable<void> Link::on_error(const FrameHeader& h) {
  std::vector<std::byte> payload(static_cast<std::size_t>(h.payload_bytes));  // bounded by the header check
  std::error_code ec;
  co_await asio::async_read(stream_, asio::buffer(payload), asio::redirect_error(kAwait, ec));
  if (state_ != State::open) co_return;
  if (ec) {
    fail(FailureCause::peer_closed, peer() + " aborted (its message was cut off)");
    co_return;
  }
  const ErrorInfo e = decode_error(payload);
  env_.fail(e.cause, e.origin >= 0 ? e.origin : peer_rank_, peer() + " aborted: " + e.text);
}

std::string Link::name_of(const Tag& t) const { return env_.tag_name ? env_.tag_name(t) : to_string(t); }

// The caller's rule: false (and the transport failed) when `arrived` cannot wait beside a
// receive of `waiting`.
bool Link::refuse_conflict(const Tag& waiting, const Tag& arrived) {
  if (!env_.conflict) return true;
  const std::string why = env_.conflict(waiting, arrived);
  if (why.empty()) return true;
  fail(FailureCause::protocol, "rank " + std::to_string(self_rank_) + " waits for " + name_of(waiting) + " from " +
                                   peer() + ", which sent " + name_of(arrived) + ": " + why);
  return false;
}

// A frame that came before its receive was posted, handed to the receive now.
bool Link::deliver_held(PendingOp& op) {
  const auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& f) { return matches(op.tag, f.header.tag); });
  if (it == held_.end()) return false;
  Held f = std::move(*it);
  held_.erase(it);
  held_bytes_ -= f.payload.size();
  if (op.buffer_for) op.buffer = op.buffer_for(f.header);
  if (f.payload.size() > op.buffer.size()) {
    fail(FailureCause::protocol, "a frame (" + name_of(f.header.tag) + ") from " + peer() + " has " +
                                     std::to_string(f.payload.size()) + " payload bytes but the posted receive buffer holds " +
                                     std::to_string(op.buffer.size()));
    return true;  // the op failed with the transport
  }
  std::copy(f.payload.begin(), f.payload.end(), op.buffer.begin());
  op.header = f.header;
  env_.liveness->tick();
  op.complete();
  return true;
}

// A frame whose tag no posted receive names while others are posted: into memory, bounded.
asio::awaitable<bool> Link::hold(const FrameHeader& h) {
  if (held_bytes_ + h.payload_bytes > env_.max_held_bytes) {
    std::string tags;
    for (const Held& f : held_) tags += (tags.empty() ? "" : ", ") + name_of(f.header.tag);
    std::string waiting;
    for (const auto& op : ops_) waiting += (waiting.empty() ? "" : ", ") + name_of(op->tag);
    fail(FailureCause::protocol, "rank " + std::to_string(self_rank_) + " would hold more than " +
                                     std::to_string(env_.max_held_bytes) + " bytes of frames from " + peer() +
                                     " that no receive names (" + name_of(h.tag) + (tags.empty() ? "" : ", ") + tags +
                                     ") while it waits for " + waiting + ": the ranks are not exchanging the same frames");
    co_return false;
  }
  Held f{h, std::vector<std::byte>(static_cast<std::size_t>(h.payload_bytes))};
  if (!co_await read_payload(h, f.payload)) co_return false;
  counts().bytes_received += h.payload_bytes;
  counts().frames_received += 1;
  held_bytes_ += h.payload_bytes;
  held_.push_back(std::move(f));
  co_return true;
}

// A DATA frame: its payload goes into the posted receive that names its tag. Until the
// caller posts any receive, the header waits here and TCP's flow control holds the
// payload at the sender; while receives for other tags are posted, it is held.
asio::awaitable<bool> Link::on_data(const FrameHeader& h) {
  if (dir_ == Dir::out) {
    fail(FailureCause::protocol, peer() + " sent a DATA frame on the link this rank sends on");
    co_return false;
  }
  std::error_code ec;
  for (;;) {
    if (state_ != State::open) co_return false;
    const auto it = std::find_if(ops_.begin(), ops_.end(), [&](const auto& op) { return matches(op->tag, h.tag); });
    if (it != ops_.end()) break;
    if (!ops_.empty()) {
      for (const auto& op : ops_)
        if (!refuse_conflict(op->tag, h.tag)) co_return false;
      co_return co_await hold(h);
    }
    reader_wake_.expires_at(asio::steady_timer::time_point::max());
    co_await reader_wake_.async_wait(asio::redirect_error(kAwait, ec));
  }
  std::shared_ptr<PendingOp> op =
      *std::find_if(ops_.begin(), ops_.end(), [&](const auto& o) { return matches(o->tag, h.tag); });
  if (op->buffer_for) op->buffer = op->buffer_for(h);  // sized to this frame, within the limits
  if (h.payload_bytes > op->buffer.size()) {
    fail(FailureCause::protocol, "a frame (" + name_of(h.tag) + ") from " + peer() + " has " +
                                     std::to_string(h.payload_bytes) + " payload bytes but the posted receive buffer holds " +
                                     std::to_string(op->buffer.size()));
    co_return false;
  }
  if (!co_await read_payload(h, op->buffer)) co_return false;  // the op stays queued: a failure completes it
  counts().bytes_received += h.payload_bytes;
  counts().frames_received += 1;
  op->header = h;
  ops_.erase(std::find(ops_.begin(), ops_.end(), op));
  env_.liveness->tick();
  op->complete();
  co_return true;
}

// ---- closing ----------------------------------------------------------------------------------

void Link::shutdown(const std::string& cause, const std::optional<ErrorInfo>& error) {
  if (state_ != State::open) return;
  state_ = State::closing;
  stream_.cancel();  // no system call of a pending read/write runs after this
  writer_wake_.cancel();
  reader_wake_.cancel();
  for (auto& op : ops_) op->complete(cause);
  ops_.clear();
  held_.clear();
  held_bytes_ = 0;
  const bool at_frame_boundary = frame_written_ == 0 || frame_written_ == frame_total_;
  if (!at_frame_boundary || !stream_.is_open()) {  // a control frame now would corrupt the stream
    stream_.close();
    closed_ = true;
    return;
  }
  spawn(linger_close(error));
}

asio::awaitable<void> Link::linger_close(std::optional<ErrorInfo> error) {
  // Bounded: the deadline closes the socket if the peer never answers.
  StreamDeadline deadline(stream_, env_.linger);
  const std::string payload = error ? encode_error(*error) : std::string();
  const std::error_code ec =
      co_await write_control(stream_, error ? FrameKind::error : FrameKind::bye, std::as_bytes(std::span(payload)));
  deadline.disarm();
  std::error_code drain_ec;
  stream_.socket().non_blocking(true, drain_ec);  // from here on every read only takes what is there
  std::vector<std::byte> scratch(64 * 1024);
  if (!ec) {
    counts().bytes_sent += kHeaderBytes + payload.size();
    counts().frames_sent += 1;
    stream_.shutdown_send();
    co_await flush_sent(scratch);
  }
  // Discard what the peer already sent: closing with unread bytes would reset the
  // connection at once. Bytes the peer acknowledged before a reset stay readable there, so
  // our last frames (and this BYE/ERROR) still arrive. Waiting for the peer's EOF instead
  // would make close() cost a round of the slowest neighbour.
  discard_unread(scratch, 64, drain_ec);  // bounded
  stream_.close();
  closed_ = true;
}

// A reset (the close below, with input unread) discards what this socket has not yet had
// acknowledged: on a slow or shaped link that is megabytes of the last frames — a peer
// still in its last collective would lose them ("connection reset in the middle of a
// frame"). So wait until the peer's kernel has acknowledged every byte sent (SIOCOUTQ:
// unsent plus unacknowledged, the FIN included), reading and discarding what the peer sends
// meanwhile; give up when neither has moved for env.linger (a peer that reads nothing and
// sends nothing), or after env.flush. A live peer still computing before it posts the
// receive for our bytes keeps its PINGs coming: that counts as moving.
asio::awaitable<void> Link::flush_sent(std::vector<std::byte>& scratch) {
  const int fd = stream_.socket().native_handle();
  std::error_code ec;
  asio::steady_timer tick(stream_.get_executor());
  const auto start = Clock::now();
  auto moved = start;
  int last = -1;
  for (;;) {
    int queued = 0;
    if (::ioctl(fd, SIOCOUTQ, &queued) != 0 || queued <= 0) break;
    const auto now = Clock::now();
    if (queued != last) {
      last = queued;
      moved = now;
    }
    if (now - moved >= env_.linger || now - start >= env_.flush) break;
    if (discard_unread(scratch, 16, ec) > 0) moved = now;
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) break;  // the peer closed or reset
    ec.clear();
    tick.expires_after(std::chrono::milliseconds(2));
    co_await tick.async_wait(asio::redirect_error(kAwait, ec));
    if (ec) break;
  }
}

std::size_t Link::discard_unread(std::vector<std::byte>& scratch, int reads, std::error_code& ec) {
  std::size_t got = 0;
  for (int i = 0; i < reads && !ec; ++i) got += stream_.socket().read_some(asio::buffer(scratch), ec);
  return got;
}

}  // namespace ringattn::net::tcp
