// ringattn — the backward's second stream on the ring: each K/V block's gradient
// accumulators (dK, dV, fp32) following it around, one hop behind, so that when the block
// has visited every rank its gradients are complete and one more hop brings them home.
//
//   rank r, step s (it holds the K/V block of origin r - s, RingStep):
//     compute this rank's share of the block's dK, dV into a fresh accumulator
//     s = 0:  start(own block, acc)           send acc  -> successor; post the receive
//     s > 0:  g = arrived(s, block)           wait the accumulators of the same origin
//             g += acc; relay(s)              send g on; post the next receive
//   after the last step: arrived(P, own)      this rank's complete dK, dV
//
// On the wire a gradient frame is laid out as a K/V block in fp32 (ring/block_layout.hpp:
// prefix, positions, documents, then dK and dV bodies) under its own tag (kGradientBlock,
// call, the step it was sent at: frame_tags.hpp), so it is never taken for a K/V block
// though it shares the link with them. arrived() checks the frame (size, prefix: same
// backward spec, the expected origin; the rows' positions and documents those of the
// block it belongs to) before anything reads it.
// Two buffers alternate (one sending, one receiving) and only grow.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ring/block_layout.hpp"
#include "net/transport.hpp"
#include "ring/block_format.hpp"
#include "ring/ring_pass.hpp"
#include "ring/ring_step.hpp"

namespace ringattn::ring {

class GradientRelay {
 public:
  explicit GradientRelay(net::Transport& transport) : t_(transport), pass_(transport) {}

  // Step 0: sends this rank's own block's accumulators (dk, dv [rows, kv_heads, head_dim]
  // fp32) and posts the receive of the predecessor's. spec.backward must be set.
  void start(const CallSpec& spec, std::uint64_t call, const RingStep::View& own, const float* dk, const float* dv);

  struct Grads {
    float* dk = nullptr;  // [rows, kv_heads, head_dim] fp32, inside the received frame
    float* dv = nullptr;
  };
  // Waits for the accumulators that belong with `block` (received at step `step`, 1..P);
  // throws NetworkError (the transport failed, naming the peer) if they are not those.
  Grads arrived(int step, const RingStep::View& block);
  // Sends what arrived (with this rank's share added) on to the successor and posts the
  // next receive (at step P-1 the one that brings this rank's own gradients home).
  void relay(int step);

  std::uint64_t payload_bytes_sent() const { return sent_; }

 private:
  BlockLayout layout(std::int64_t rows) const;
  net::Tag tag(int step) const;

  net::Transport& t_;
  RingPass pass_;
  CallSpec spec_;
  std::uint64_t call_ = 0;
  std::vector<std::byte> out_, in_;
  std::size_t out_bytes_ = 0;  // of the frame in out_ (to send next)
  std::int64_t rows_ = 0;       // its rows
  std::uint64_t sent_ = 0;
};

}  // namespace ringattn::ring
