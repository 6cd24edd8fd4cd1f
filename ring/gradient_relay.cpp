#include "ring/gradient_relay.hpp"

#include <cstring>
#include <string>

#include "ringattn/error.hpp"
#include "ring/frame_tags.hpp"

namespace ringattn::ring {

BlockLayout GradientRelay::layout(std::int64_t rows) const {
  return BlockLayout::kv(DType::f32, spec_.kv_heads * spec_.head_dim, static_cast<std::uint32_t>(rows),
                              spec_.documents);
}

// Sent at `step`; the successor takes it at step + 1.
net::Tag GradientRelay::tag(int step) const { return {kGradientBlock, call_, static_cast<std::uint64_t>(step)}; }

void GradientRelay::start(const CallSpec& spec, std::uint64_t call, const RingStep::View& own, const float* dk,
                          const float* dv) {
  spec_ = spec;
  call_ = call;
  sent_ = 0;
  const BlockLayout l = layout(own.rows);
  out_bytes_ = static_cast<std::size_t>(l.bytes());
  rows_ = own.rows;
  if (out_.size() < out_bytes_) out_.resize(out_bytes_);
  const auto prefix = encode_prefix({spec, own.origin});
  std::memcpy(out_.data(), prefix.data(), prefix.size());
  for (std::int64_t i = 0; i < own.rows; ++i) l.put_tag(out_.data(), static_cast<std::size_t>(i), own.positions->at(i));
  for (std::size_t i = 0; i < own.documents.size(); ++i) l.put_group(out_.data(), i, own.documents[i]);
  std::memcpy(out_.data() + l.body(0), dk, static_cast<std::size_t>(l.body_bytes));
  std::memcpy(out_.data() + l.body(1), dv, static_cast<std::size_t>(l.body_bytes));
  pass_.post(tag(0), std::span<const std::byte>(out_.data(), out_bytes_), std::nullopt, in_);
  sent_ += out_bytes_;
}

GradientRelay::Grads GradientRelay::arrived(int step, const RingStep::View& block) {
  const net::FrameHeader h = pass_.finish();
  const int self = t_.rank(), pred = t_.predecessor();
  const auto R = [&](int r) { return std::to_string(t_.ring_rank(r)); };  // ranks in messages: the ring's
  const std::string at = "rank " + R(self) + ": backward step " + std::to_string(step) + " of call " +
                         std::to_string(call_) + ": the gradients from predecessor rank " + R(pred);
  auto refuse = [&](FailureCause cause, int origin, const std::string& why) {
    const std::string msg = at + " " + why;
    t_.abort(cause, origin, msg.substr(("rank " + R(self) + ": ").size()));
    throw NetworkError(msg, cause, origin);
  };
  BlockPrefix p;
  if (std::string err = decode_prefix(std::span<const std::byte>(in_.data(), h.payload_bytes), p); !err.empty())
    refuse(FailureCause::protocol, pred, "have a bad prefix: " + err);
  if (std::string err = compare_specs(spec_, t_.ring_rank(self), p.spec, t_.ring_rank(p.origin)); !err.empty())
    refuse(FailureCause::mismatch, p.origin, "do not match this call: " + err);
  if (p.origin != block.origin)
    refuse(FailureCause::protocol, pred,
           "belong to rank " + R(p.origin) + "'s block, expected rank " + R(block.origin) + "'s");
  const BlockLayout l = layout(block.rows);
  if (h.payload_bytes != l.bytes())
    refuse(FailureCause::protocol, pred,
           "have " + std::to_string(h.payload_bytes) + " payload bytes; rank " + R(block.origin) +
               "'s block of " + std::to_string(block.rows) + " rows of " + std::to_string(spec_.kv_heads * spec_.head_dim) +
               " fp32 gradients has " + std::to_string(l.bytes()));
  for (std::int64_t i = 0; i < block.rows; ++i)
    if (l.tag(in_.data(), static_cast<std::size_t>(i)) != block.positions->at(i))
      refuse(FailureCause::protocol, pred,
             "carry position " + std::to_string(l.tag(in_.data(), static_cast<std::size_t>(i))) + " at row " +
                 std::to_string(i) + " where rank " + R(block.origin) + "'s block has " +
                 std::to_string(block.positions->at(i)));
  for (std::size_t i = 0; i < block.documents.size(); ++i)
    if (l.group(in_.data(), i) != block.documents[i])
      refuse(FailureCause::protocol, pred,
             "carry document " + std::to_string(l.group(in_.data(), i)) + " at row " + std::to_string(i) +
                 " where rank " + R(block.origin) + "'s block has " + std::to_string(block.documents[i]));
  out_bytes_ = static_cast<std::size_t>(h.payload_bytes);
  rows_ = block.rows;
  return {reinterpret_cast<float*>(in_.data() + l.body(0)), reinterpret_cast<float*>(in_.data() + l.body(1))};
}

void GradientRelay::relay(int step) {
  std::swap(out_, in_);  // what arrived goes on; the buffer just sent takes the next frame
  pass_.post(tag(step), std::span<const std::byte>(out_.data(), out_bytes_), std::nullopt, in_);
  sent_ += out_bytes_;
}

}  // namespace ringattn::ring
