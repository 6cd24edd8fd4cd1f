// A ring connection's reader and writer coroutines (see link.hpp).
#include "net/tcp/link.hpp"

#include <algorithm>
#include <array>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <cstdio>
#include <vector>

#include "net/crc32c.hpp"
#include "net/tcp/coroutines.hpp"

namespace ringattn::net::tcp {
namespace {

std::string endpoint_text(const Socket& s, bool remote) {
  std::error_code ec;
  const auto ep = remote ? s.remote_endpoint(ec) : s.local_endpoint(ec);
  if (ec) return "?";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

constexpr auto kAwait = asio::use_awaitable;

}  // namespace

Link::Link(Socket socket, Dir dir, int self_rank, int peer_rank, LinkEnv& env)
    : socket_(std::move(socket)),
      dir_(dir),
      self_rank_(self_rank),
      peer_rank_(peer_rank),
      env_(env),
      wake_(socket_.get_executor(), asio::steady_timer::time_point::max()) {
  const std::string a = "rank " + std::to_string(self_rank) + " (" + endpoint_text(socket_, false) + ")";
  const std::string b = "rank " + std::to_string(peer_rank) + " (" + endpoint_text(socket_, true) + ")";
  name_ = dir == Dir::out ? a + " -> " + b : b + " -> " + a;
}

std::string Link::peer() const {
  return (dir_ == Dir::out ? "successor rank " : "predecessor rank ") + std::to_string(peer_rank_);
}

void Link::start() {
  if (dir_ == Dir::out) spawn(writer());
  spawn(reader());
}

void Link::post(std::shared_ptr<PendingOp> op) {
  if (state_ != State::open) {
    op->complete("the link to " + peer() + " is closed");
    return;
  }
  ops_.push_back(std::move(op));
  if (dir_ == Dir::out && bye_received_) {  // fails the op just queued, with the rest
    env_.fail("cannot send to " + peer() + ": it has closed the ring (BYE)");
    return;
  }
  wake_.cancel();
}

void Link::report(const std::string& context, const std::error_code& ec) {
  if (state_ != State::open) return;  // we are closing: errors are expected
  if (ec == asio::error::eof)
    env_.fail(peer() + " closed the connection (EOF) " + context);
  else
    env_.fail("connection to " + peer() + " failed " + context + ": " + ec.message());
}

void Link::spawn(asio::awaitable<void> coroutine) {
  asio::co_spawn(socket_.get_executor(), std::move(coroutine), [this](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      env_.fail(std::string("internal error on the link to ") + peer() + ": " + ex.what());
    }
  });
}

asio::awaitable<void> Link::writer() {
  std::error_code ec;
  while (state_ == State::open) {
    if (ops_.empty()) {
      co_await wake_.async_wait(asio::redirect_error(kAwait, ec));
      continue;
    }
    std::shared_ptr<PendingOp> op = ops_.front();
    if (op->crc_pending) {
      op->header.payload_crc = crc32c(op->payload);
      op->crc_pending = false;
    }
    const HeaderBytes hb = encode_header(op->header);
    const std::span<const std::byte> payload = op->payload;
    frame_total_ = kHeaderBytes + payload.size();
    frame_written_ = 0;
    while (frame_written_ < frame_total_) {
      // Header and the first chunk go out in one gathered write.
      std::array<asio::const_buffer, 2> bufs;
      if (frame_written_ < kHeaderBytes) {
        bufs[0] = asio::buffer(hb.data() + frame_written_, kHeaderBytes - frame_written_);
        bufs[1] = asio::buffer(payload.data(), std::min(payload.size(), kIoChunkBytes));
      } else {
        const std::size_t off = frame_written_ - kHeaderBytes;
        bufs[0] = asio::buffer(payload.data() + off, std::min(payload.size() - off, kIoChunkBytes));
      }
      const std::size_t n = co_await socket_.async_write_some(bufs, asio::redirect_error(kAwait, ec));
      if (state_ != State::open) co_return;
      if (ec) {
        report("while sending", ec);
        co_return;
      }
      frame_written_ += n;
    }
    env_.counters->bytes_sent += frame_total_;
    env_.counters->frames_sent += 1;
    ops_.pop_front();
    op->complete();
  }
}

asio::awaitable<bool> Link::read_payload(const FrameHeader& h, PendingOp& op) {
  std::error_code ec;
  std::uint32_t crc = 0;
  std::uint64_t got = 0;
  while (got < h.payload_bytes) {
    std::byte* dst = op.buffer.data() + got;
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(h.payload_bytes - got, kReadChunkBytes));
    const std::size_t n = co_await socket_.async_read_some(asio::buffer(dst, want), asio::redirect_error(kAwait, ec));
    if (state_ != State::open) co_return false;  // op already failed; its buffer is no longer ours
    if (ec) {
      report("in the middle of a " + std::string(to_string(h.kind)) + " frame (step " + std::to_string(h.step) +
                 ", " + std::to_string(got) + " of " + std::to_string(h.payload_bytes) + " payload bytes)",
             ec);
      co_return false;
    }
    crc = crc32c(crc, std::span<const std::byte>(dst, n));  // while the chunk is still in cache
    got += n;
  }
  if (crc != h.payload_crc) {
    env_.fail("payload CRC32C mismatch on a " + std::string(to_string(h.kind)) + " frame (step " +
              std::to_string(h.step) + ") from " + peer() + ": header says " + hex32(h.payload_crc) +
              ", payload has " + hex32(crc));
    co_return false;
  }
  co_return true;
}

asio::awaitable<void> Link::reader() {
  std::error_code ec;
  HeaderBytes hb{};
  while (state_ == State::open) {
    if (dir_ == Dir::in && ops_.empty()) {  // read only into posted buffers
      co_await wake_.async_wait(asio::redirect_error(kAwait, ec));
      continue;
    }
    co_await asio::async_read(socket_, asio::buffer(hb), asio::redirect_error(kAwait, ec));
    if (state_ != State::open) co_return;
    if (ec) {
      if (ec == asio::error::eof && bye_received_ && ops_.empty()) co_return;  // polite close
      report(dir_ == Dir::in ? "while a receive was posted" : "while this rank sends to it", ec);
      co_return;
    }
    env_.counters->bytes_received += kHeaderBytes;
    FrameHeader h;
    if (std::string err = try_decode_header(hb, env_.limits, h); !err.empty()) {
      env_.fail("bad frame header from " + peer() + ": " + err);
      co_return;
    }
    switch (h.kind) {
      case FrameKind::bye:
        bye_received_ = true;
        env_.counters->frames_received += 1;
        if (!ops_.empty()) {
          env_.fail(peer() + " closed the ring (BYE) with " + std::to_string(ops_.size()) + " " +
                    (dir_ == Dir::in ? "receive(s)" : "send(s)") + " pending");
          co_return;
        }
        continue;  // expect EOF next
      case FrameKind::error: {
        std::vector<std::byte> text(static_cast<std::size_t>(h.payload_bytes));  // <= kMaxErrorBytes, validated
        co_await asio::async_read(socket_, asio::buffer(text), asio::redirect_error(kAwait, ec));
        if (state_ != State::open) co_return;
        env_.fail(peer() + " aborted: " + (ec ? std::string("(its message was cut off)") : error_text(text)));
        co_return;
      }
      case FrameKind::hello:
      case FrameKind::auth:
        env_.fail("unexpected " + std::string(to_string(h.kind)) + " frame from " + peer() + " after the handshake");
        co_return;
      case FrameKind::kv_block:
      case FrameKind::state: break;
    }
    if (dir_ == Dir::out) {
      env_.fail(peer() + " sent a " + std::string(to_string(h.kind)) + " frame on the link this rank sends on");
      co_return;
    }
    std::shared_ptr<PendingOp> op = ops_.front();
    if (h.payload_bytes > op->buffer.size()) {
      env_.fail(std::string(to_string(h.kind)) + " frame (step " + std::to_string(h.step) + ") from " + peer() +
                " has " + std::to_string(h.payload_bytes) + " payload bytes but the posted receive buffer holds " +
                std::to_string(op->buffer.size()));
      co_return;
    }
    if (!co_await read_payload(h, *op)) co_return;
    env_.counters->bytes_received += h.payload_bytes;
    env_.counters->frames_received += 1;
    op->header = h;
    ops_.pop_front();
    op->complete();
  }
}

void Link::shutdown(const std::string& cause, const std::string& error_text) {
  if (state_ != State::open) return;
  state_ = State::closing;
  std::error_code ignored;
  socket_.cancel(ignored);  // no system call of a pending read/write runs after this
  wake_.cancel();
  for (auto& op : ops_) op->complete(cause);
  ops_.clear();
  const bool at_frame_boundary = frame_written_ == 0 || frame_written_ == frame_total_;
  if (!at_frame_boundary || !socket_.is_open()) {  // a control frame now would corrupt the stream
    socket_.close(ignored);
    closed_ = true;
    return;
  }
  spawn(linger_close(error_text));
}

asio::awaitable<void> Link::linger_close(std::string error_text) {
  // Bounded: the timer closes the socket if the peer never answers.
  asio::steady_timer deadline(socket_.get_executor(), env_.linger);
  deadline.async_wait([this](std::error_code ec) {
    std::error_code ignored;
    if (!ec) socket_.close(ignored);
  });
  std::error_code ec;
  if (error_text.size() > kMaxErrorBytes) error_text.resize(kMaxErrorBytes);
  FrameHeader h;
  h.kind = error_text.empty() ? FrameKind::bye : FrameKind::error;
  h.payload_bytes = error_text.size();
  h.payload_crc = crc32c(error_text);
  const HeaderBytes hb = encode_header(h);
  const std::array<asio::const_buffer, 2> frame{asio::buffer(hb), asio::buffer(error_text)};
  co_await asio::async_write(socket_, frame, asio::redirect_error(kAwait, ec));
  if (!ec) {
    env_.counters->bytes_sent += kHeaderBytes + error_text.size();
    env_.counters->frames_sent += 1;
    socket_.shutdown(asio::socket_base::shutdown_send, ec);
  }
  // Discard what the peer already sent: closing with unread bytes would reset the
  // connection at once. Bytes queued at the peer before a reset stay readable there, so
  // our last frames (and this BYE/ERROR) still arrive. Waiting for the peer's EOF instead
  // would make close() cost a round of the slowest neighbour.
  std::error_code drain_ec;
  socket_.non_blocking(true, drain_ec);
  std::vector<std::byte> scratch(64 * 1024);
  for (int i = 0; i < 64 && !drain_ec; ++i) socket_.read_some(asio::buffer(scratch), drain_ec);  // bounded
  deadline.cancel();
  std::error_code ignored;
  socket_.close(ignored);
  closed_ = true;
}

}  // namespace ringattn::net::tcp
