#include "ring/ring_pass.hpp"

namespace ringattn::ring {

void RingPass::post(const net::Tag& to, net::Payload out, std::optional<std::uint32_t> crc, const net::Tag& from,
                    std::vector<std::byte>& in) {
  send_ = t_.isend(t_.successor(), to, std::move(out), crc);
  // Sized to the frame that comes: other ranks may hold more rows than this one.
  recv_ = t_.irecv(t_.predecessor(), from, [&in](const net::FrameHeader& h) {
    if (in.size() < h.payload_bytes) in.resize(static_cast<std::size_t>(h.payload_bytes));
    return std::span<std::byte>(in.data(), static_cast<std::size_t>(h.payload_bytes));
  });
}

net::FrameHeader RingPass::finish() {
  t_.wait(send_);
  return t_.wait(recv_);
}

}  // namespace ringattn::ring
