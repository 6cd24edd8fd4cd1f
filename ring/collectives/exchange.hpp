// ringattn — the frames of the generic collectives (all_gather.hpp, reduce_scatter.hpp,
// all_reduce.hpp, all_to_all.hpp): opaque bytes between two ranks, each frame naming what
// it is, and a receive that names what it waits for.
//
// A collective's frame is a DATA frame (net/wire.hpp) tagged (ring/frame_tags.hpp): the
// schedule is the collective's kind in its family (a program's collectives, or Ulysses'),
// the call its call number, the step (its step << 16) | the piece: a payload larger than
// one frame may carry (the ring's negotiated maximum) goes as pieces of at most that size.
// The transport hands each receive the frame of its tag; the receiver knows, from the
// collective's arguments, the exact bytes of every piece, and a frame of another length is
// taken in (bounded by the negotiated maximum, never into the caller's buffer), dropped,
// and fails the ring on every rank naming both what was expected and what came. A frame
// of another collective or call meets the ring's conflict rule (frame_tags.hpp) and fails
// the ring at once, naming both. So a rank that calls another collective, another call or
// another size than its peers is refused at the first frame, never read as data.
//
//   Exchange x(transport, max_frame);
//   x.send(to, {kind, call, step}, bytes);      // any number, to any ranks
//   x.receive(from, {kind, call, step}, into);  // into.size(): the exact bytes expected
//   ... work ...                                // overlaps the transfers
//   x.wait();                                   // all of them; throws NetworkError
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/transport.hpp"
#include "ring/frame_tags.hpp"

namespace ringattn::collectives {


enum class Kind : std::uint32_t { all_gather = 1, reduce_scatter = 2, all_reduce = 3, all_to_all = 4 };  // all_to_all last
const char* to_string(Kind k);

struct FrameId {
  Kind kind;
  std::uint64_t call = 0;
  std::uint32_t step = 0;  // the collective's step
};

struct ExchangeStats {
  std::uint64_t bytes_sent = 0;
  double wait_seconds = 0;
};

class Exchange {
 public:
  // max_frame: the largest payload one frame may carry (the ring's negotiated maximum);
  // family: whose collectives these are (a program's, or Ulysses': frame_tags.hpp).
  Exchange(net::Transport& t, std::uint64_t max_frame, ring::Family family = ring::Family::collective);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // `bytes` must stay untouched until wait() returns or throws.
  void send(int to, FrameId id, std::span<const std::byte> bytes);
  // Exactly into.size() bytes, as the pieces the sender's send() of that size makes.
  void receive(int from, FrameId id, std::span<std::byte> into);
  // One frame of whatever size comes (at most max_frame), `into` resized to it on arrival.
  void receive_sized(int from, FrameId id, std::vector<std::byte>& into);
  std::uint64_t max_frame() const { return max_frame_; }
  // Waits for every send and receive posted since the last wait(). On a frame that is not
  // the expected one the ring fails (transport abort, protocol cause) on every rank and
  // NetworkError says which rank expected what from whom and what came.
  void wait();

  const ExchangeStats& stats() const { return stats_; }  // since construction
  // What was sent and waited since `before` (an earlier stats()): one call's share.
  ExchangeStats since(const ExchangeStats& before) const {
    return {stats_.bytes_sent - before.bytes_sent, stats_.wait_seconds - before.wait_seconds};
  }
  net::Transport& transport() const { return t_; }

 private:
  struct Receive;
  net::Transport& t_;
  std::uint64_t max_frame_;
  ring::Family family_;
  std::uint32_t schedule_of(Kind k) const;
  std::vector<net::Request> sends_;
  std::vector<std::shared_ptr<Receive>> receives_;
  ExchangeStats stats_;
};

}  // namespace ringattn::collectives
