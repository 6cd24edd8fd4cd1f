// The transport of a one-rank ring: the rank is its own successor and predecessor, so a
// frame sent is the next frame received. No sockets and no I/O thread. A send completes
// at once (the payload is copied into a queue); a receive completes when a frame is
// queued. Useful on its own for world == 1 and as an in-memory stand-in in tests.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "net/pending_op.hpp"
#include "net/transport.hpp"

namespace ringattn::net {

class SelfTransport final : public Transport {
 public:
  explicit SelfTransport(const TransportConfig& config);
  ~SelfTransport() override { close(); }

  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::uint16_t listen_port() const override { return 0; }
  void connect(const std::vector<PeerAddress>& peers) override;
  Request isend(int to, const Tag& tag, Payload payload, std::optional<std::uint32_t> crc) override;
  Request irecv(int from, const Tag& tag, std::span<std::byte> buffer) override;
  Request irecv(int from, const Tag& tag, BufferFor buffer_for) override;
  FrameHeader wait(Request& request) override;
  bool test(const Request& request) const override;
  TransportStats stats() const override;
  Liveness& liveness() override { return liveness_; }
  std::string failure() const override;
  void announce_leaving() override { liveness_.set_leaving(); }  // no peers to tell
  std::vector<int> leaving_peers() const override { return {}; }
  void abort(FailureCause cause, int origin, const std::string& message) override;
  void close() override;

 private:
  struct Frame {
    FrameHeader header;
    std::vector<std::byte> payload;
  };
  void match_locked();  // pairs queued frames with posted receives
  Request post_recv(int from, std::shared_ptr<PendingOp> op);

  TransportConfig config_;
  FrameLimits limits_;
  mutable std::mutex mu_;
  std::deque<Frame> frames_;
  std::deque<std::shared_ptr<PendingOp>> recvs_;
  TransportStats stats_;
  bool closed_ = false;
  std::string failure_;
  Liveness liveness_;
};

}  // namespace ringattn::net
