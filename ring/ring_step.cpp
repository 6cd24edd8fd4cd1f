#include "ring/ring_step.hpp"

#include <cstring>

#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ring/frame_tags.hpp"

namespace ringattn::ring {

BlockLayout RingStep::layout(std::int64_t rows) const {
  return BlockLayout::kv(spec_.dtype, spec_.kv_heads * spec_.head_dim, static_cast<std::uint32_t>(rows),
                              spec_.documents);
}

void RingStep::set_view(int origin, std::int64_t rows) {
  const BlockLayout l = layout(rows);
  view_.origin = origin;
  view_.rows = rows;
  view_.positions = &positions_;
  view_.documents = docs_;
  view_.k = a_.data() + l.body(0);
  view_.v = a_.data() + l.body(1);
}

void RingStep::start(const CallSpec& spec, std::uint64_t call, const Positions& positions, bool borrow,
                     std::span<const std::int32_t> documents) {
  spec_ = spec;
  call_ = call;
  crc_.reset();
  sent_ = 0;
  borrowed_ = false;
  const std::int64_t rows = positions.size();
  positions_ = positions;
  positions.materialize_into(tags_);
  own_.assign(tags_.begin(), tags_.end());
  if (spec.documents ? static_cast<std::int64_t>(documents.size()) != rows : !documents.empty())
    throw InvalidArgument("RingStep: " + std::to_string(documents.size()) + " document ids for " +
                          std::to_string(positions.size()) + " rows");
  const BlockLayout l = layout(rows);
  a_bytes_ = l.bytes();
  head_bytes_ = l.head_bytes();
  // Borrowing, A holds only the description and positions (K and V stay where they are),
  // so the smaller buffer will do and the larger one is kept for what comes in.
  if (borrow && a_.size() > b_.size()) std::swap(a_, b_);
  if (const std::size_t need = borrow ? head_bytes_ : a_bytes_; a_.size() < need) a_.resize(need);
  const auto prefix = encode_prefix({spec, t_.rank()});
  std::memcpy(a_.data(), prefix.data(), prefix.size());
  for (std::size_t i = 0; i < tags_.size(); ++i) l.put_tag(a_.data(), i, tags_[i]);
  docs_.assign(documents.begin(), documents.end());
  for (std::size_t i = 0; i < documents.size(); ++i) l.put_group(a_.data(), i, documents[i]);
  if (borrow) {
    view_ = View{t_.rank(), rows, &positions_, docs_, nullptr, nullptr};
    borrowed_ = true;
  } else {
    set_view(t_.rank(), rows);
  }
}

void RingStep::begin_raw(const CallSpec& spec, std::uint64_t call, const Positions& positions,
                         const void* k, const void* v, std::span<const std::int32_t> documents) {
  start(spec, call, positions, false, documents);
  const std::size_t bytes = layout(view_.rows).body_bytes;
  if (k && bytes) std::memcpy(const_cast<void*>(view_.k), k, bytes);
  if (v && bytes) std::memcpy(const_cast<void*>(view_.v), v, bytes);
}

void RingStep::begin(const CallSpec& spec, std::uint64_t call, const Positions& positions, const float* k,
                     const float* v, bool borrow, std::span<const std::int32_t> documents) {
  if (spec.dtype == DType::f32 && borrow) {
    start(spec, call, positions, true, documents);  // description, positions and documents in A
    view_.k = k;
    view_.v = v;
    return;
  }
  if (spec.dtype == DType::f32) return begin_raw(spec, call, positions, k, v, documents);
  start(spec, call, positions, false, documents);
  const std::int64_t n = static_cast<std::int64_t>(positions.size()) * spec.kv_heads * spec.head_dim;
  to_bf16(k, static_cast<std::uint16_t*>(const_cast<void*>(view_.k)), n);
  to_bf16(v, static_cast<std::uint16_t*>(const_cast<void*>(view_.v)), n);
}

std::span<std::byte> RingStep::block() {
  if (borrowed_) throw InvalidArgument("RingStep::block(): the block's K and V are the caller's (begin with borrow = false)");
  return {a_.data(), a_bytes_};
}

bool RingStep::sending_borrowed() const { return borrowed_ && pass_.sending(); }

void RingStep::post(int step) {
  const net::Tag tag{kKvBlock, call_, static_cast<std::uint64_t>(step)};
  if (borrowed_) {
    const std::size_t kv = layout(view_.rows).body_bytes;
    pass_.post(tag,
               net::Payload(std::span<const std::byte>(a_.data(), head_bytes_),
                            std::span<const std::byte>(static_cast<const std::byte*>(view_.k), kv),
                            std::span<const std::byte>(static_cast<const std::byte*>(view_.v), kv)),
               crc_, b_);
  } else {
    pass_.post(tag, std::span<const std::byte>(a_.data(), a_bytes_), crc_, b_);
  }
  sent_ += a_bytes_;
}

void RingStep::finish(int step) {
  const net::FrameHeader h = pass_.finish();
  const int world = t_.world(), self = t_.rank(), pred = t_.predecessor();
  const int expect = ((self - step - 1) % world + world) % world;  // whose block comes now
  const auto R = [&](int r) { return std::to_string(t_.ring_rank(r)); };  // ranks in messages: the ring's
  const std::string at = "rank " + R(self) + ": ring step " + std::to_string(step) + " of call " +
                         std::to_string(call_) + ": the block from predecessor rank " + R(pred);
  auto refuse = [&](FailureCause cause, int origin, const std::string& why) {
    const std::string msg = at + " " + why;
    t_.abort(cause, origin, msg.substr(("rank " + R(self) + ": ").size()));
    throw NetworkError(msg, cause, origin);
  };
  BlockPrefix p;
  if (std::string err = decode_prefix(std::span<const std::byte>(b_.data(), h.payload_bytes), p); !err.empty())
    refuse(FailureCause::protocol, pred, "has a bad prefix: " + err);
  if (std::string err = compare_specs(spec_, t_.ring_rank(self), p.spec, t_.ring_rank(p.origin)); !err.empty())
    refuse(FailureCause::mismatch, p.origin, "does not match this call: " + err);
  if (p.origin != expect)
    refuse(FailureCause::protocol, pred, "holds rank " + R(p.origin) + "'s rows, expected rank " + R(expect) + "'s");
  // The rows: what the payload's size makes of this spec's rows, 1 .. the ring's limit.
  std::uint32_t rows = 0;
  if (!BlockLayout::rows_of(layout(0), h.payload_bytes, max_rows_, rows) || rows == 0)
    refuse(FailureCause::protocol, pred,
           "has " + std::to_string(h.payload_bytes) + " payload bytes, which are not 1.." + std::to_string(max_rows_) +
               " rows of this call's K/V (" + spec_.describe() + (spec_.documents ? ", with documents" : "") + ")");
  const BlockLayout l = layout(rows);
  // Positions: decoded into a scratch array, checked strictly increasing.
  tags_.resize(rows);
  for (std::uint32_t i = 0; i < rows; ++i) tags_[i] = l.tag(b_.data(), i);
  try {
    positions_ = Positions::from_sorted(tags_.data(), static_cast<std::int64_t>(rows));
  } catch (const InvalidArgument& e) {
    refuse(FailureCause::protocol, p.origin, std::string("carries rank ") + R(p.origin) + "'s " + e.what());
  }
  // Positions are global, each on one rank: another rank's block holding one of this rank's
  // own means the ranks passed overlapping positions (attention would count those keys
  // twice). (A probe that laps the ring gets its own block back: that is no overlap.)
  for (std::size_t i = 0, j = 0; p.origin != self && i < own_.size() && j < rows;) {
    if (own_[i] == tags_[j])
      refuse(FailureCause::mismatch, p.origin,
             "carries position " + std::to_string(own_[i]) + ", which rank " + R(self) + " holds too: every global " +
                 "position belongs to one rank (shard the sequence with shard_positions or shard_documents)");
    if (own_[i] < tags_[j]) ++i;
    else ++j;
  }
  // Documents: decoded likewise, checked non-decreasing (the kernel's invariant).
  groups_.resize(spec_.documents ? rows : 0);
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    groups_[i] = l.group(b_.data(), i);
    if (i && groups_[i] < groups_[i - 1])
      refuse(FailureCause::protocol, p.origin,
             "carries rank " + R(p.origin) + "'s document ids decreasing at row " + std::to_string(i) +
                 " (" + std::to_string(groups_[i - 1]) + " then " + std::to_string(groups_[i]) + ")");
  }
  std::swap(docs_, groups_);
  crc_ = h.payload_crc;  // relay it next step without recomputing
  std::swap(a_, b_);
  borrowed_ = false;
  a_bytes_ = static_cast<std::size_t>(h.payload_bytes);
  set_view(p.origin, rows);
}

}  // namespace ringattn::ring
