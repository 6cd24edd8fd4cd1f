// ringattn — messages between the ranks of a connected Ring, beside its attention calls:
// for a program that runs a protocol of its own on the ring's links (ringattn serve sends
// job shards, results and node info this way).
//
// A message is one frame on the link to its rank, tagged with its type (1 ..
// kMaxMessageType: the program's own vocabulary; the numbers above are the library's own
// frames) and a job number, with a payload of 0 .. the ring's largest frame (RingLimits),
// CRC-checked and bounded by the receiver before a byte of it is read, like every frame.
// A receive names the type it waits for and takes the first message of that type from
// that rank, whatever its job; messages of one type from one rank arrive in the order
// they were sent. A message of another type waits for its own receive (held in memory, at
// most twice the largest frame per rank, beyond which the ring fails naming the types),
// so a program's messages are never confused with each other or with the ring's frames,
// and may be sent between calls or beside them.
#pragma once

#include <cstdint>
#include <vector>
#include <memory>

namespace ringattn {

// The largest type a program's message may have.
inline constexpr std::uint32_t kMaxMessageType = 0xFFFEFFFFu;

struct MessageHeader {
  std::uint32_t type = 0;   // 1 .. kMaxMessageType
  std::uint64_t job = 0;    // the program's; opaque to the ring
  std::uint64_t bytes = 0;  // of the payload
};

// A posted send or receive (Ring::send_message, Ring::receive_message); cheap to copy.
class MessageRequest {
 public:
  MessageRequest() = default;
  bool valid() const { return state_ != nullptr; }

 private:
  friend class Ring;
  struct State;
  std::shared_ptr<State> state_;
};

// What this rank's links have carried so far: every frame, headers included.
struct RingTraffic {
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  std::uint64_t frames_sent = 0, frames_received = 0;
  double io_cpu_seconds = 0;  // CPU time of the ring's I/O thread (CRC32C included)
  struct Link {
    int peer = 0;  // the rank at its other end
    std::uint64_t bytes_sent = 0, bytes_received = 0;
  };
  std::vector<Link> links;  // the bytes above by peer, ascending (those that carried any)
};

}  // namespace ringattn
