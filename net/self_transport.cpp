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

Request SelfTransport::isend(int to, FrameHeader header, Payload payload, std::optional<std::uint32_t> crc) {
  if (to != 0) throw InvalidArgument("rank 0: isend to rank " + std::to_string(to) + " in a world of one");
  check_data_send(header, payload.size(), limits_, "rank 0: ");
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

Request SelfTransport::irecv(int from, std::span<std::byte> buffer) {
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::recv, this);
  op->buffer = buffer;
  return post_recv(from, std::move(op));
}

Request SelfTransport::irecv(int from, BufferFor buffer_for) {
  auto op = std::make_shared<PendingOp>(PendingOp::Dir::recv, this);
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

void SelfTransport::match_locked() {
  while (!frames_.empty() && !recvs_.empty()) {
    Frame f = std::move(frames_.front());
    frames_.pop_front();
    auto op = recvs_.front();
    recvs_.pop_front();
    if (op->done()) {  // gave up waiting; the frame goes to the next receive
      frames_.push_front(std::move(f));
      continue;
    }
    if (op->buffer_for) op->buffer = op->buffer_for(f.header);
    if (f.payload.size() > op->buffer.size()) {
      op->complete("rank 0: frame of " + std::to_string(f.payload.size()) + " bytes does not fit the receive buffer of " +
                   std::to_string(op->buffer.size()) + " bytes");
      continue;
    }
    std::copy(f.payload.begin(), f.payload.end(), op->buffer.begin());
    op->header = f.header;
    stats_.frames_received++;
    stats_.bytes_received += kHeaderBytes + f.payload.size();
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
