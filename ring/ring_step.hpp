// ringattn — one rank's side of the ring schedule for one call: its own block first,
// then the blocks of the other ranks as they come around, double-buffered.
//
//   begin(spec, call, positions, K, V)      A <- this rank's block (prefix, positions,
//                                                [document ids,] K, V)
//   for step s = 0 .. P-1:
//     current()                             the block in A: whose, its positions, K, V
//     if s < P-1: post(s)                   send A -> successor, receive B <- predecessor
//                                           (one ring pass, ring_pass.hpp)
//     ... fold current() ...                -- overlaps both transfers
//     if s < P-1: finish(s)                 wait both; check B; A <-> B
//
// At step s the kernel reads A while the transport sends A and fills B; the two buffers
// are never written while read. begin() may borrow the caller's K and V instead of
// copying them into A (fp32 only: bf16 is converted into A): step 0 then sends A's
// description and positions followed by the caller's arrays in one gathered frame, and
// the caller's arrays must stay untouched until finish(0) — or, if the call fails,
// until the transport is closed (sending_borrowed() says whether that is needed). A block is relayed with the CRC it arrived with, so the
// CRC is computed once per block, by its owner. The receive buffer is sized when the
// frame's header arrives (within the ring's limits), and both buffers only grow, so a
// run of calls of one shape allocates nothing after the first.
//
// Its frames are tagged (kKvBlock, call, step: frame_tags.hpp), so the transport hands
// finish() only this call's block of this step. finish() checks what arrived before anyone
// reads it: the prefix (the same spec as this rank's, documents or not included, from the
// rank whose turn it is), the size (a whole number of this spec's rows, 1 .. max_rows),
// the positions (strictly increasing) and the document ids (non-decreasing). Anything else fails the transport,
// and so the call on every rank, with a message naming both sides.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "net/transport.hpp"
#include "ringattn/positions.hpp"
#include "ring/block_format.hpp"
#include "ring/ring_pass.hpp"

namespace ringattn::ring {

class RingStep {
 public:
  // max_rows: the ring's limit on one block's rows.
  RingStep(net::Transport& transport, std::uint32_t max_rows) : t_(transport), pass_(transport), max_rows_(max_rows) {}

  // Starts call number `call`: this rank's block into A. k and v are [rows, kv_heads,
  // head_dim] fp32, converted to spec.dtype on the way in; with `borrow` and fp32, not
  // copied but sent from where they are (see above). `documents`: one id per row when
  // spec.documents (checked by the caller), else empty.
  // `positions`: the rows' global positions, validated by the caller (strictly increasing).
  void begin(const CallSpec& spec, std::uint64_t call, const Positions& positions, const float* k, const float* v,
             bool borrow = false, std::span<const std::int32_t> documents = {});
  // The same with K and V already in spec.dtype (raw bytes, rows * kv_heads * head_dim
  // elements each).
  void begin_raw(const CallSpec& spec, std::uint64_t call, const Positions& positions, const void* k, const void* v,
                 std::span<const std::int32_t> documents = {});

  struct View {
    int origin = 0;           // the rank whose rows these are
    std::int64_t rows = 0;
    const Positions* positions = nullptr;
    std::span<const std::int32_t> documents;  // empty unless the call has documents
    const void* k = nullptr;  // [rows, kv_heads, head_dim] in spec.dtype
    const void* v = nullptr;
  };
  const View& current() const { return view_; }

  void post(int step);
  void finish(int step);

  std::uint64_t payload_bytes_sent() const { return sent_; }
  // Bytes of the block in A as they go on the wire (prefix, positions, K, V).
  std::size_t block_bytes() const { return a_bytes_; }
  // The block's bytes to change in place (fault injection only; not while borrowing).
  std::span<std::byte> block();
  // True while step 0's send may still read the caller's K and V.
  bool sending_borrowed() const;
  net::Transport& transport() const { return t_; }

 private:
  void start(const CallSpec& spec, std::uint64_t call, const Positions& positions, bool borrow,
             std::span<const std::int32_t> documents);
  BlockLayout layout(std::int64_t rows) const;  // of a block of this call
  void set_view(int origin, std::int64_t rows);

  net::Transport& t_;
  CallSpec spec_;
  std::uint64_t call_ = 0;
  std::vector<std::byte> a_, b_;
  std::size_t a_bytes_ = 0;  // of the block in A (with borrowed K and V: their bytes too)
  std::size_t head_bytes_ = 0;  // prefix and positions: what A holds of a borrowed block
  bool borrowed_ = false;       // A's K and V are the caller's arrays (step 0 only)
  std::optional<std::uint32_t> crc_;  // A's CRC once it arrived from a peer
  Positions positions_;               // of the block in A
  std::vector<std::int64_t> tags_;    // scratch for decoding positions
  std::vector<std::int64_t> own_;     // this rank's positions in this call (no visiting block may hold one)
  std::vector<std::int32_t> docs_, groups_;  // of the block in A; scratch for decoding them
  View view_;
  RingPass pass_;
  std::uint32_t max_rows_;
  std::uint64_t sent_ = 0;
};

}  // namespace ringattn::ring
