// ringattn — the ring reduce-scatter of partial online-softmax states: each rank ends with
// the reduction, over every rank's contribution, of the partial that belongs to it.
//
//   before step 0, on rank R: compute(R-1)            its contribution to origin R-1
//   step s = 0 .. P-2:
//     send    partial[R-s-1]  -> successor         (merged from s+1 ranks: R-s-1 .. R)
//     receive partial[R-s-2]  <- predecessor       (merged from s+1 ranks)
//     compute(R-s-2)                               -- overlaps both transfers
//     merge the received partial into partial[R-s-2]
//
// Invariant: after step s, partial[R-s-2] holds the contributions of s+2 ranks; after step
// P-2, partial[R] holds all P. Partials travel as frames of `schedule` (rows of o | m | l,
// fp32; the receiver knows their exact size), steps numbered from `first_step`; an origin
// with no rows sends and receives nothing. Decode's step 4 (decode.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ring/all_gather.hpp"

namespace ringattn::ring {

// Per-token rows of a partial on the wire: o [heads * head_dim], m [heads], l [heads].
void put_state(std::vector<std::byte>& out, const OnlineSoftmaxState& s);
void get_state(const std::vector<std::byte>& in, OnlineSoftmaxState& s);

struct ReduceScatterBuffers {
  std::vector<OnlineSoftmaxState> partial;     // by origin
  OnlineSoftmaxState incoming;                 // a predecessor's partial, before the merge
  std::vector<std::byte> state_out, state_in;  // the partials' payloads
};

// rows[origin]: that origin's token count (every rank agrees: they came by the all-gather).
// compute(origin) resets and fills b.partial[origin] with this rank's contribution.
// refuse(cause, origin, what) fails the ring with a message naming what arrived.
template <class Compute, class Refuse>
PassStats reduce_scatter(net::Transport& t, std::uint32_t schedule, std::uint64_t call, std::uint64_t first_step,
                         const std::vector<std::size_t>& rows, std::int64_t heads, std::int64_t head_dim,
                         ReduceScatterBuffers& b, Compute&& compute, Refuse&& refuse) {
  using Clock = std::chrono::steady_clock;
  const int R = t.rank(), P = t.world();
  const std::size_t cols = static_cast<std::size_t>(heads * (head_dim + 2));
  PassStats st;
  compute(ring_mod(R - 1, P));
  for (int s = 0; s + 1 < P; ++s) {
    const int send_c = ring_mod(R - s - 1, P), recv_c = ring_mod(R - s - 2, P);
    const std::size_t send_rows = rows[static_cast<std::size_t>(send_c)], recv_rows = rows[static_cast<std::size_t>(recv_c)];
    const std::uint64_t step = first_step + static_cast<std::uint64_t>(s);
    net::Request sreq, rreq;
    if (send_rows > 0) {
      put_state(b.state_out, b.partial[static_cast<std::size_t>(send_c)]);
      sreq = t.isend(t.successor(), {schedule, call, step}, std::span<const std::byte>(b.state_out));
      st.bytes_sent += b.state_out.size();
    }
    if (recv_rows > 0) {
      b.state_in.resize(recv_rows * cols * 4);
      rreq = t.irecv(t.predecessor(), {schedule, call, step}, std::span<std::byte>(b.state_in));
    }
    compute(recv_c);  // overlaps both transfers
    const auto t0 = Clock::now();
    if (sreq.valid()) t.wait(sreq);
    if (rreq.valid()) {
      const net::FrameHeader got = t.wait(rreq);
      const int pred = t.predecessor();
      if (got.payload_bytes != b.state_in.size())
        refuse(FailureCause::protocol, pred,
               "the partial states from predecessor rank " + std::to_string(pred) + " at reduce step " +
                   std::to_string(s) + " are not the " + std::to_string(recv_rows) + " rows of rank " +
                   std::to_string(recv_c) + "'s tokens this call expects (" + std::to_string(b.state_in.size()) +
                   " bytes): they have " + std::to_string(got.payload_bytes));
      b.incoming.reset(static_cast<std::int64_t>(recv_rows), heads, head_dim);
      get_state(b.state_in, b.incoming);
      merge(b.partial[static_cast<std::size_t>(recv_c)], b.incoming);
    }
    st.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return st;
}

}  // namespace ringattn::ring
