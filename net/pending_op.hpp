// One posted isend/irecv as the backends keep it: what to move, and a completion that
// the progressing side signals exactly once and the caller waits on with a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <span>
#include <string>

#include "net/liveness.hpp"
#include "net/transport.hpp"
#include "net/wire.hpp"
#include "ringattn/error.hpp"

namespace ringattn::net {

class PendingOp final : public RequestState {
 public:
  enum class Dir : std::uint8_t { send, recv };
  using Clock = std::chrono::steady_clock;

  PendingOp(Dir dir, const void* owner) : dir_(dir), owner_(owner) {}

  Dir dir() const { return dir_; }
  const void* owner() const { return owner_; }  // the transport that created it

  // Set when posted: the peer rank, and once the op is queued on a link, that link's
  // record of what it heard from the peer (read by the waiter for its deadline).
  int peer = -1;
  std::atomic<const PeerLiveness*> live{nullptr};

  // Progress side. `header` is the frame as sent/received; set it before complete().
  FrameHeader header;
  Tag tag;                             // recv: the tag it waits for
  Payload payload;                     // send
  std::span<std::byte> buffer;         // recv
  Transport::BufferFor buffer_for;     // recv: asked for the buffer once the header is known
  bool crc_pending = false;            // send: header.payload_crc still to be computed

  // First call wins; returns false if the op had already completed. An empty `error`
  // means success.
  bool complete(std::string error = {}) {
    {
      std::lock_guard lock(mu_);
      if (done_) return false;
      done_ = true;
      error_ = std::move(error);
    }
    cv_.notify_all();
    return true;
  }

  // Caller side. True if completed by `deadline`.
  bool wait_until(Clock::time_point deadline) const {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return done_; });
  }
  bool done() const {
    std::lock_guard lock(mu_);
    return done_;
  }
  std::string error() const {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  Dir dir_;
  const void* owner_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

// What every backend's isend checks before posting: a DATA frame of `tag` and `payload_bytes`
// that fits the limits. `prefix` ("rank R: ") starts the InvalidArgument's message.
inline FrameHeader check_data_send(const Tag& tag, std::size_t payload_bytes, const FrameLimits& limits,
                                   const std::string& prefix) {
  FrameHeader header = data_header(tag);
  header.payload_bytes = payload_bytes;
  if (std::string err = check_header(header, limits); !err.empty()) throw InvalidArgument(prefix + "isend: " + err);
  return header;
}

// What every backend's irecv checks: a tag a DATA frame can have.
inline void check_recv_tag(const Tag& tag, const std::string& prefix) {
  if (tag.schedule == 0) throw InvalidArgument(prefix + "irecv of schedule 0 (DATA frames name schedule 1 or more)");
}

// Transport::test for the backends built on PendingOp.
inline bool request_done(const Request& request) {
  const auto* op = dynamic_cast<const PendingOp*>(request.state());
  return op != nullptr && op->done();
}

}  // namespace ringattn::net
