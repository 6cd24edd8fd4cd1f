// The one-rank ring: a queue in memory.
#include "net/self_transport.hpp"

#include <algorithm>

#include "net/crc32c.hpp"
#include "ringattn/error.hpp"

namespace ringattn::net {

SelfTransport::SelfTransport(const TransportConfig& config) : config_(config), limits_(FrameLimits::for_limits(config.limits)) {
  if (config.world != 1 || config.rank != 0)
    throw InvalidArgument("SelfTransport is for world size 1, rank 0 (got rank " + std::to_string(config.rank) +
                          " of " + std::to_string(config.world) + ")");
}

void SelfTransport::connect(const std::vector<PeerAddress>&) {}

Request SelfTransport::isend(int to, const Tag& tag, Payload payload, std::optional<std::uint32_t> crc) {
  if (to != 0) throw InvalidArgument("rank 0: isend to rank " + std::to_string(to) + " in a world of one");
  FrameHeader header = check_data_send(tag, payload.size(), limits_, "rank 0: ");
  std::vector<std::byte> bytes;
  bytes.reserve(payload.size());
  for (const auto& part : payload.parts) bytes.insert(bytes.end(), part.begin(), part.end());
  header.payload_crc = crc ? *crc : crc32c(bytes);
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::send, this);
  op->header = header;
  std::lock_guard lock(mu_);
  if (closed_) {
    op->complete("rank 0: isend after close()");
    return Request(op);
  }
  frames_.push_back(Frame{header, std::move(bytes)});
  stats_.frames_sent++;
  stats_.bytes_sent += kHeaderBytes + payload.size();
  op->complete();
  match_locked();
  return Request(op);
}

Request SelfTransport::irecv(int from, const Tag& tag, std::span<std::byte> buffer) {
  check_recv_tag(tag, "rank 0: ");
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::recv, this);
  op->tag = tag;
  op->buffer = buffer;
  return post_recv(from, std::move(op));
}

Request SelfTransport::irecv(int from, const Tag& tag, BufferFor buffer_for) {
  check_recv_tag(tag, "rank 0: ");
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::recv, this);
  op->tag = tag;
  op->buffer_for = std::move(buffer_for);
  return post_recv(from, std::move(op));
}

Request SelfTransport::post_recv(int from, std::shared_ptr<PendingOp> op) {
  if (from != 0) throw InvalidArgument("rank 0: irecv from rank " + std::to_string(from) + " in a world of one");
  std::lock_guard lock(mu_);
  if (closed_) {
    op->complete("rank 0: irecv after close()");
    return Request(op);
  }
  recvs_.push_back(op);
  match_locked();
  return Request(op);
}

std::string SelfTransport::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void SelfTransport::abort(FailureCause, int, const std::string& message) {
  std::lock_guard lock(mu_);
  if (failure_.empty()) failure_ = "rank 0: " + message;
  for (auto& op : recvs_) op->complete(failure_);
  recvs_.clear();
  closed_ = true;
}

// Each receive, in the order posted, takes the first frame sent with its tag.
void SelfTransport::match_locked() {
  for (auto r = recvs_.begin(); r != recvs_.end();) {
    const auto op = *r;
    if (op->done()) {  // gave up waiting
      r = recvs_.erase(r);
      continue;
    }
    const auto f = std::find_if(frames_.begin(), frames_.end(), [&](const Frame& x) { return matches(op->tag, x.header.tag); });
    if (f == frames_.end()) {
      ++r;
      continue;
    }
    r = recvs_.erase(r);
    const Frame frame = std::move(*f);
    frames_.erase(f);
    if (op->buffer_for) op->buffer = op->buffer_for(frame.header);
    if (frame.payload.size() > op->buffer.size()) {
      op->complete("rank 0: frame of " + std::to_string(frame.payload.size()) +
                   " bytes does not fit the receive buffer of " + std::to_string(op->buffer.size()) + " bytes");
      continue;
    }
    std::copy(frame.payload.begin(), frame.payload.end(), op->buffer.begin());
    op->header = frame.header;
    stats_.frames_received++;
    stats_.bytes_received += kHeaderBytes + frame.payload.size();
    op->complete();
  }
}

FrameHeader SelfTransport::wait(Request& request) {
  auto* op = dynamic_cast<PendingOp*>(request.state());
  if (op == nullptr || op->owner() != this) throw InvalidArgument("rank 0: wait() on a request of another transport");
  if (!op->wait_until(PendingOp::Clock::now() + config_.io_timeout)) {
    std::string cause = "rank 0: timed out after " + std::to_string(config_.io_timeout.count()) +
                        " ms waiting for a frame (world size 1: post the isend before waiting on the irecv)";
    std::lock_guard lock(mu_);  // so match_locked() never fills a request that gave up
    op->complete(cause);
  }
  if (std::string err = op->error(); !err.empty()) throw NetworkError(err);
  return op->header;
}

bool SelfTransport::test(const Request& request) const { return request_done(request); }

TransportStats SelfTransport::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void SelfTransport::close() {
  std::lock_guard lock(mu_);
  if (closed_) return;
  closed_ = true;
  for (auto& op : recvs_) op->complete("rank 0: transport closed");
  recvs_.clear();
  frames_.clear();
}

}  // namespace ringattn::net
