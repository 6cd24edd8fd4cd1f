#include "ring/decode_call.hpp"

#include <cstring>

#include "ringattn/error.hpp"

namespace ringattn::ring {

// This rank's tokens as a queries payload.
void DecodeCall::encode(std::vector<std::byte>& out, std::span<const std::int32_t> seqs, std::span<const std::int64_t> pos,
                      std::span<const float> q, std::span<const float> k, std::span<const float> v) const {
  const BlockLayout L = layout(pos.size());
  out.resize(L.bytes());
  const auto prefix = encode_prefix({cs, rank()});
  std::memcpy(out.data(), prefix.data(), prefix.size());
  for (std::size_t i = 0; i < L.rows; ++i) {
    L.put_tag(out.data(), i, pos[i]);
    L.put_group(out.data(), i, seqs[i]);
  }
  const std::size_t qn = static_cast<std::size_t>(H * D), kn = static_cast<std::size_t>(KH * D);
  for (std::size_t i = 0; i < L.rows; ++i) {
    std::byte* row = out.data() + L.body(0) + i * cols * esz;
    const float* parts[3] = {q.data() + i * qn, k.data() + i * kn, v.data() + i * kn};
    const std::size_t lens[3] = {qn, kn, kn};
    for (int p = 0; p < 3; ++p) {
      if (cs.dtype == DType::bf16) ops.to_bf16(parts[p], reinterpret_cast<std::uint16_t*>(row), static_cast<std::int64_t>(lens[p]));
      else std::memcpy(row, parts[p], lens[p] * 4);
      row += lens[p] * esz;
    }
  }
}

std::size_t DecodeCall::check_query(const std::vector<std::byte>& buf, int step, int expect) {
  const int pred = t.predecessor();
  const std::string from = "the queries from predecessor rank " + std::to_string(t.ring_rank(pred)) + " at step " + std::to_string(step);
  BlockPrefix p;
  if (std::string err = decode_prefix(buf, p); !err.empty())
    refuse(FailureCause::protocol, pred, from + " have a bad prefix: " + err);
  if (std::string err = compare_specs(cs, t.ring_rank(rank()), p.spec, t.ring_rank(p.origin)); !err.empty())
    refuse(FailureCause::mismatch, p.origin, from + " do not match this call: " + err);
  if (p.origin != expect)
    refuse(FailureCause::protocol, pred, from + " are rank " + std::to_string(t.ring_rank(p.origin)) + "'s, expected rank " +
                                             std::to_string(t.ring_rank(expect)) + "'s");
  std::uint32_t rows = 0;
  if (!BlockLayout::rows_of(layout(0), buf.size(), max_rows, rows))
    refuse(FailureCause::protocol, pred,
           from + " have " + std::to_string(buf.size()) + " payload bytes, which are not 0.." +
               std::to_string(max_rows) + " tokens of this call's q|k|v (" + cs.describe() + ")");
  const BlockLayout L = layout(rows);
  for (std::size_t i = 0; i < L.rows; ++i) {
    const std::int64_t pos = L.tag(buf.data(), i);
    const std::int32_t seq = L.group(buf.data(), i);
    if (pos < 0 || seq < 0)
      refuse(FailureCause::protocol, p.origin,
             from + " hold token " + std::to_string(i) + " with position " + std::to_string(pos) + " and sequence " +
                 std::to_string(seq) + " (both must be >= 0)");
  }
  return L.rows;
}

void put_state(std::span<float> out, const OnlineSoftmaxState& s) {
  const std::size_t H = static_cast<std::size_t>(s.heads), D = static_cast<std::size_t>(s.head_dim);
  const std::size_t row = H * (D + 2);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r) {
    float* b = out.data() + r * row;
    std::memcpy(b, s.o.data() + r * H * D, H * D * 4);
    std::memcpy(b + H * D, s.m.data() + r * H, H * 4);
    std::memcpy(b + H * (D + 1), s.l.data() + r * H, H * 4);
  }
}

void get_state(std::span<const float> in, OnlineSoftmaxState& s) {
  const std::size_t H = static_cast<std::size_t>(s.heads), D = static_cast<std::size_t>(s.head_dim);
  const std::size_t row = H * (D + 2);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r) {
    const float* b = in.data() + r * row;
    std::memcpy(s.o.data() + r * H * D, b, H * D * 4);
    std::memcpy(s.m.data() + r * H, b + H * D, H * 4);
    std::memcpy(s.l.data() + r * H, b + H * (D + 1), H * 4);
  }
}

}  // namespace ringattn::ring
