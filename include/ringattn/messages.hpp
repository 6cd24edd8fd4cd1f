// ringattn — messages between the ranks of a connected Ring, beside its attention calls:
// for a program that runs a protocol of its own on the ring's links (ringattn serve sends
// job shards, results and node info this way).
//
// A message is one MESSAGE frame on the link to its rank: a type (1 .. kMaxMessageType:
// the program's own vocabulary; the types above are the library's collectives), a job number, and a payload of 0 .. the ring's largest frame
// (RingLimits), CRC-checked and bounded by the receiver before a byte of it is read, like
// every frame. Messages from one rank arrive in the order it sent them, in one stream with
// the ring's own frames from that rank: between calls only, never while a forward() or
// decode() of the same ring runs. A receive names the type it expects; any other frame
// fails the ring (a protocol error, naming both types and the rank), so a program's
// messages cannot be confused with each other or with the ring's blocks.
#pragma once

#include <cstdint>
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
};

}  // namespace ringattn
