#include "src/ring/kv_ring.hpp"

#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "ringattn/error.hpp"
#include "core/logger.hpp"

namespace ringattn::ring {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// FNV-1a over the options that change the answer but are not part of the wire shape.
std::uint64_t digest(const AttentionConfig& cfg, Layout layout) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<std::uint64_t>(layout));
  mix(static_cast<std::uint64_t>(cfg.mask.kind));
  mix(static_cast<std::uint64_t>(cfg.mask.window));
  std::uint32_t scale_bits;
  std::memcpy(&scale_bits, &cfg.scale, 4);
  mix(scale_bits);
  return h;
}

}  // namespace

net::JobShape ring_job_shape(const AttentionConfig& cfg, Layout layout, std::int64_t tokens, int world) {
  net::JobShape s;
  s.heads = static_cast<std::uint32_t>(cfg.heads);
  s.kv_heads = static_cast<std::uint32_t>(cfg.kv_heads);
  s.head_dim = static_cast<std::uint32_t>(cfg.head_dim);
  s.max_block_rows = static_cast<std::uint32_t>(max_shard_rows(layout, tokens, world));
  s.dtype = cfg.dtype;
  s.tokens = static_cast<std::uint64_t>(tokens);
  s.options_digest = digest(cfg, layout);
  return s;
}

KvRing::KvRing(net::RingTransport& transport, BlockAttention& attn, Layout layout, std::int64_t tokens)
    : t_(transport),
      attn_(attn),
      rank_(transport.rank()),
      world_(transport.world()),
      shape_(ring_job_shape(attn.config(), layout, tokens, transport.world())) {
  for (int r = 0; r < world_; ++r) positions_.push_back(shard_positions(layout, tokens, world_, r));
  const auto& cfg = attn_.config();
  row_bytes_ = static_cast<std::size_t>(cfg.kv_heads * cfg.head_dim) * dtype_size(cfg.dtype);
  const std::size_t most = static_cast<std::size_t>(max_shard_rows(layout, tokens, world_));
  buf_a_.resize(2 * most * row_bytes_);
  if (world_ > 1) buf_b_.resize(2 * most * row_bytes_);
}

RingForwardStats KvRing::forward(const void* q, const void* k, const void* v, OnlineSoftmaxState& state,
                                 std::uint64_t job_id) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  RingForwardStats st;
  const Positions& qpos = local_positions();
  const std::size_t my_rows = static_cast<std::size_t>(qpos.size());
  if (k != buf_a_.data()) std::memcpy(buf_a_.data(), k, my_rows * row_bytes_);
  if (v != buf_a_.data() + my_rows * row_bytes_) std::memcpy(buf_a_.data() + my_rows * row_bytes_, v, my_rows * row_bytes_);
  std::optional<std::uint32_t> crc;  // known once a block has arrived: relay it as is
  // Busy while folding, the kernel ticking the counter per tile; wait() marks the waits.
  const auto busy = t_.liveness().enter(net::PeerState::busy);
  attn_.set_progress_counter(&t_.liveness().counter());
  struct Unhook {
    BlockAttention& a;
    ~Unhook() { a.set_progress_counter(nullptr); }
  } unhook{attn_};

  for (int s = 0; s < world_; ++s) {
    const int src = (rank_ - s + world_) % world_;
    const Positions& kpos = positions_[static_cast<std::size_t>(src)];
    const std::size_t rows = static_cast<std::size_t>(kpos.size());
    if (hook_) hook_(s, std::span<std::byte>(buf_a_.data(), 2 * rows * row_bytes_));
    net::Request send, recv;
    if (s < world_ - 1) {
      const auto hdr = net::kv_block_header(shape_, job_id, static_cast<std::uint64_t>(s), static_cast<std::uint32_t>(rows));
      send = t_.isend(hdr, std::span<const std::byte>(buf_a_.data(), 2 * rows * row_bytes_), crc);
      recv = t_.irecv(std::span<std::byte>(buf_b_.data(), buf_b_.size()));
      st.payload_bytes_sent += 2 * rows * row_bytes_;
    }
    const auto t0 = clock::now();
    const FoldStats fs = attn_.fold(q, qpos, buf_a_.data(), buf_a_.data() + rows * row_bytes_, kpos, state);
    st.compute_seconds += seconds_since(t0);
    st.useful_flops += fs.useful_flops;
    ++st.steps;
    if (fs.tiles_computed == 0) ++st.steps_skipped;
    if (s < world_ - 1) {
      const auto t1 = clock::now();
      t_.wait(send);
      const net::FrameHeader h = t_.wait(recv);
      st.wait_seconds += seconds_since(t1);
      const int next_src = (src - 1 + world_) % world_;
      const std::uint64_t want_rows = static_cast<std::uint64_t>(positions_[static_cast<std::size_t>(next_src)].size());
      if (h.kind != net::FrameKind::kv_block || h.step != static_cast<std::uint64_t>(s) || h.rows != want_rows ||
          h.job_id != job_id)
        throw NetworkError("rank " + std::to_string(rank_) + ": ring step " + std::to_string(s) + ": predecessor rank " +
                           std::to_string((rank_ - 1 + world_) % world_) + " sent " +
                           std::string(net::to_string(h.kind)) + " step " + std::to_string(h.step) + " job " +
                           std::to_string(h.job_id) + " with " + std::to_string(h.rows) + " rows; expected the block of rank " +
                           std::to_string(next_src) + " (step " + std::to_string(s) + ", job " + std::to_string(job_id) +
                           ", " + std::to_string(want_rows) + " rows)");
      crc = h.payload_crc;
      std::swap(buf_a_, buf_b_);
    }
  }
  st.total_seconds = seconds_since(start);
  return st;
}

}  // namespace ringattn::ring
