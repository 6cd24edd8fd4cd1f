#include "src/serve/peer_messages.hpp"

#include <algorithm>
#include <cstring>

#include "net/byte_order.hpp"
#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"

namespace ringattn::serve::peer {
namespace {


net::FrameHeader state_header(Tag tag, std::uint64_t job, std::uint32_t rows, std::uint32_t cols) {
  net::FrameHeader h;
  h.kind = net::FrameKind::state;
  h.dtype = DType::f32;
  h.job_id = job;
  h.step = tag;
  h.rows = rows;
  h.cols = cols;
  return h;
}

[[noreturn]] void bad(const std::string& what) {
  throw NetworkError("rank 0 sent a job shard that " + what, FailureCause::protocol, 0);
}

}  // namespace

Frame text_frame(const std::string& text, Tag tag, const RingLimits& limits) {
  const std::size_t floats = std::max<std::size_t>(1, (text.size() + 3) / 4);
  const std::size_t max_cols = static_cast<std::size_t>(limits.max_heads * (limits.max_head_dim + 2));
  const std::size_t cols = std::min(floats, max_cols);
  const std::size_t rows = (floats + cols - 1) / cols;
  if (rows > static_cast<std::size_t>(limits.max_rows)) throw Error("internal: node info does not fit the ring's limits");
  Frame f{state_header(tag, 0, static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(cols)), {}};
  f.payload.assign(rows * cols * 4, std::byte{' '});
  std::memcpy(f.payload.data(), text.data(), text.size());
  return f;
}

std::string frame_text(std::span<const std::byte> payload) {
  std::string s(reinterpret_cast<const char*>(payload.data()), payload.size());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::vector<std::byte> shard_payload(const JobRequest& q, const Positions& pos) {
  const std::int64_t rows = pos.size();
  const auto cols = static_cast<std::uint32_t>(q.kv_heads * q.head_dim);
  const auto layout = net::BlockLayout::kv(DType::f32, cols, static_cast<std::uint32_t>(rows), false);
  std::vector<std::byte> out(layout.bytes());
  std::byte* p = out.data();
  net::put_le<std::uint32_t>(p + 0, static_cast<std::uint32_t>(q.heads));
  net::put_le<std::uint32_t>(p + 4, static_cast<std::uint32_t>(q.head_dim));
  net::put_le<std::uint8_t>(p + 8, static_cast<std::uint8_t>(q.mask.kind));
  net::put_le<std::uint8_t>(p + 9, static_cast<std::uint8_t>(q.dtype));
  net::put_le<std::uint8_t>(p + 10, q.want_lse ? 1 : 0);
  net::put_le<std::uint8_t>(p + 11, static_cast<std::uint8_t>(q.layout));
  net::put_le<std::uint64_t>(p + 12, static_cast<std::uint64_t>(q.mask.window));
  net::put_le<std::uint64_t>(p + 20, static_cast<std::uint64_t>(q.tokens));
  std::vector<std::int64_t> positions;
  pos.materialize_into(positions);
  for (std::size_t r = 0; r < positions.size(); ++r) layout.put_tag(p, r, positions[r]);
  return out;
}

std::vector<std::byte> query_payload(const JobRequest& q, const Positions& pos) {
  return std::vector<std::byte>(static_cast<std::size_t>(pos.size() * q.heads * q.head_dim) * 4);
}

net::FrameHeader shard_header(std::uint64_t job_id, const JobRequest& q, std::int64_t rows) {
  return net::kv_block_header(DType::f32, static_cast<std::uint32_t>(q.kv_heads * q.head_dim), job_id, kShard,
                              static_cast<std::uint32_t>(rows));
}

net::FrameHeader query_header(std::uint64_t job_id, const JobRequest& q, std::int64_t rows) {
  return state_header(kQuery, job_id, static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(q.heads * q.head_dim));
}

std::span<float> query_rows(std::vector<std::byte>& payload) {
  return {reinterpret_cast<float*>(payload.data()), payload.size() / 4};
}

Shard shard_view(std::vector<std::byte>& payload, const JobRequest& q, std::int64_t rows) {
  Shard s;
  s.request = q;
  const auto layout = net::BlockLayout::kv(DType::f32, static_cast<std::uint32_t>(q.kv_heads * q.head_dim),
                                           static_cast<std::uint32_t>(rows), false);
  s.positions.resize(static_cast<std::size_t>(rows));
  for (std::size_t r = 0; r < s.positions.size(); ++r) s.positions[r] = layout.tag(payload.data(), r);
  const std::size_t n = static_cast<std::size_t>(rows * q.kv_heads * q.head_dim);
  auto* kv = reinterpret_cast<float*>(payload.data() + layout.body(0));
  s.k = {kv, n};
  s.v = {kv + n, n};
  return s;
}

Shard decode_shard(const net::FrameHeader& h, std::vector<std::byte>& payload, int world, const RingLimits& limits) {
  if (h.kind != net::FrameKind::kv_block || h.step != kShard || h.dtype != DType::f32) bad("is not a SHARD frame");
  if (payload.size() != net::kv_block_bytes(DType::f32, h.cols, h.rows)) bad("has the wrong size");
  const std::byte* p = payload.data();
  JobRequest q;
  q.heads = net::get_le<std::uint32_t>(p + 0);
  q.head_dim = net::get_le<std::uint32_t>(p + 4);
  const auto mask = net::get_le<std::uint8_t>(p + 8);
  const auto dtype = net::get_le<std::uint8_t>(p + 9);
  q.want_lse = net::get_le<std::uint8_t>(p + 10) != 0;
  const auto layout = net::get_le<std::uint8_t>(p + 11);
  const auto window = static_cast<std::int64_t>(net::get_le<std::uint64_t>(p + 12));
  q.tokens = static_cast<std::int64_t>(net::get_le<std::uint64_t>(p + 20));
  if (q.heads < 1 || q.heads > limits.max_heads || q.head_dim < 1 || q.head_dim > limits.max_head_dim ||
      h.cols % q.head_dim != 0)
    bad("has heads " + std::to_string(q.heads) + ", head_dim " + std::to_string(q.head_dim) + " for " +
        std::to_string(h.cols) + " columns");
  q.kv_heads = h.cols / q.head_dim;
  if (q.kv_heads < 1 || q.heads % q.kv_heads != 0) bad("has kv_heads that do not divide heads");
  if (mask > 2 || dtype > 1 || layout > 2) bad("has an unknown mask, dtype or layout");
  q.mask = mask == 0 ? Mask::none() : mask == 1 ? Mask::causal() : Mask::sliding_window(window);
  if (q.mask.kind == MaskKind::window && window < 1) bad("has a window < 1");
  q.dtype = static_cast<DType>(dtype);
  q.layout = static_cast<Layout>(layout);
  if (q.tokens < world || q.tokens > limits.max_rows * world) bad("has " + std::to_string(q.tokens) + " tokens");
  Shard s = shard_view(payload, q, h.rows);
  for (std::size_t r = 0; r < s.positions.size(); ++r)
    if (s.positions[r] < 0 || s.positions[r] >= q.tokens || (r > 0 && s.positions[r] <= s.positions[r - 1]))
      bad("has positions that are not increasing within 0..tokens-1");
  return s;
}

std::vector<std::byte> encode_stats(const NodeResult& r) {
  const double d[8] = {r.seconds, r.compute_seconds, r.wait_seconds, r.useful_flops, static_cast<double>(r.steps),
                       static_cast<double>(r.steps_skipped), static_cast<double>(r.bytes_sent), static_cast<double>(r.rows)};
  std::vector<std::byte> out(64);
  std::memcpy(out.data(), d, 64);
  return out;
}

NodeResult decode_stats(std::span<const std::byte> payload, int rank) {
  double d[8] = {};
  if (payload.size() == 64) std::memcpy(d, payload.data(), 64);
  NodeResult r;
  r.rank = rank;
  r.seconds = d[0];
  r.compute_seconds = d[1];
  r.wait_seconds = d[2];
  r.useful_flops = d[3];
  r.steps = static_cast<int>(d[4]);
  r.steps_skipped = static_cast<int>(d[5]);
  r.bytes_sent = static_cast<std::uint64_t>(d[6]);
  r.rows = static_cast<std::int64_t>(d[7]);
  return r;
}

}  // namespace ringattn::serve::peer
