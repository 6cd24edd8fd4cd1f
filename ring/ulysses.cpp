// Ring::forward_ulysses (include/ringattn/ring.hpp): Ulysses' schedule, its steps in
// ring/ulysses.hpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "ring/block_format.hpp"
#include "ring/call_checks.hpp"
#include "ring/internals.hpp"
#include "ring/ring_impl.hpp"
#include "ring/ulysses.hpp"
#include "ringattn/byte_order.hpp"
#include "ringattn/error.hpp"
#include "ringattn/ring.hpp"

namespace ringattn {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What every rank says of its call, compared across the ranks before any row moves: the
// K/V blocks' own prefix (block_format.hpp: the CallSpec and this rank), then its rows.
constexpr std::size_t kHeaderBytes = ring::kBlockPrefixBytes + 8;
std::vector<std::byte> call_header(const ring::CallSpec& cs, int rank, std::int64_t rows) {
  std::vector<std::byte> b(kHeaderBytes);
  const auto prefix = ring::encode_prefix({cs, rank});
  std::copy(prefix.begin(), prefix.end(), b.begin());
  put_le<std::int64_t>(b.data() + ring::kBlockPrefixBytes, rows);
  return b;
}

std::size_t size_of(DType t) { return t == DType::bf16 ? 2 : 4; }

// Heads [h0, h0 + count) of `rows` rows of a [rows, heads, width] fp32 tensor into dst as
// [rows, count, width] in `wire`.
void pack_heads(const float* src, std::int64_t rows, std::int64_t heads, std::int64_t width, std::int64_t h0,
                std::int64_t count, DType wire, std::byte* dst) {
  const std::int64_t w = count * width;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* s = src + (r * heads + h0) * width;
    if (wire == DType::bf16)
      to_bf16(s, reinterpret_cast<std::uint16_t*>(dst) + r * w, w);
    else
      std::memcpy(dst + static_cast<std::size_t>(r * w) * 4, s, static_cast<std::size_t>(w) * 4);
  }
}

// The call as every rank sees it after the first two steps: every shard's rows, the order
// of the whole sequence, the head split.
struct Plan {
  int P = 1, R = 0;
  std::int64_t n = 0, N = 0, h = 0, hk = 0, group = 0;
  std::vector<std::int64_t> rows, first_row;  // by rank; first_row[j]: rank j's first row in rank order
  std::int64_t first(int j, bool kv) const { return kv ? (j * h) / group : j * h; }
  std::int64_t count(bool kv) const { return kv ? hk : h; }
  // The kernel's call: this rank's heads, the resolved scale.
  AttentionSpec local(const AttentionSpec& spec, float scale) const {
    AttentionSpec l = spec;
    l.heads = h;
    l.kv_heads = hk;
    l.scale = scale;
    return l;
  }
};

// A tensor the head split moves: [rows, heads, width] fp32 rows, of query heads (kv false)
// or K/V heads; on the wire as `wire`.
struct Field {
  const float* src;
  std::int64_t heads, width;
  bool kv;
  DType wire;
};

std::string who(const Ring& ring, const char* call) { return "rank " + std::to_string(ring.rank()) + ": " + call + ": "; }

// Steps 1 and 2 (ulysses.hpp): the head split's conditions, the call headers compared,
// the positions gathered and ordered.
Plan plan_call(Ring& ring, Ring::Impl& im, ring::UlyssesState& u, collectives::ExchangeStats& moved, const char* call,
               const ring::CallSpec& cs, std::span<const std::int64_t> positions) {
  auto bad = [&](const std::string& what) { throw InvalidArgument(who(ring, call) + what); };
  auto add = [&moved](const collectives::ExchangeStats& s) {
    moved.bytes_sent += s.bytes_sent;
    moved.wait_seconds += s.wait_seconds;
  };
  auto spans = [](std::vector<std::vector<std::byte>>& blocks) {
    return std::vector<std::span<std::byte>>(blocks.begin(), blocks.end());
  };
  Plan p;
  p.P = ring.world_size();
  p.R = ring.rank();
  const std::int64_t H = cs.heads;
  if (H % p.P != 0)
    bad(std::to_string(H) + " query heads do not split over " + std::to_string(p.P) +
        " ranks (Ulysses shards heads: use the ring's call)");
  p.h = H / p.P;
  p.group = H / cs.kv_heads;
  if (p.h % p.group != 0 && p.group % p.h != 0)
    bad("each rank's " + std::to_string(p.h) + " query heads would read parts of K/V heads shared by " +
        std::to_string(p.group) + " query heads (heads/P and heads/kv_heads must divide one another)");
  p.hk = p.h % p.group == 0 ? p.h / p.group : 1;
  p.n = static_cast<std::int64_t>(positions.size());
  const auto Pz = static_cast<std::size_t>(p.P);

  u.headers.assign(Pz, std::vector<std::byte>(kHeaderBytes));
  u.headers[static_cast<std::size_t>(p.R)] = call_header(cs, p.R, p.n);
  add(u.gather.run(spans(u.headers)));
  p.rows.resize(Pz);
  ring::BlockPrefix first;
  for (std::size_t j = 0; j < Pz; ++j) {
    ring::BlockPrefix theirs;
    if (const std::string e = ring::decode_prefix(std::span(u.headers[j]).first(ring::kBlockPrefixBytes), theirs); !e.empty())
      bad("rank " + std::to_string(j) + "'s call header: " + e);
    if (j == 0) first = theirs;
    if (!ring::compare_specs(first.spec, 0, theirs.spec, static_cast<int>(j)).empty())
      bad("rank " + std::to_string(j) + " calls with " + theirs.spec.describe() + ", rank 0 with " + first.spec.describe());
    p.rows[j] = get_le<std::int64_t>(u.headers[j].data() + ring::kBlockPrefixBytes);
    if (p.rows[j] < 1 || p.rows[j] > im.options.limits.max_rows)
      bad("rank " + std::to_string(j) + " calls with " + std::to_string(p.rows[j]) + " rows, outside 1.." +
          std::to_string(im.options.limits.max_rows));
  }
  p.first_row.assign(Pz + 1, 0);
  std::partial_sum(p.rows.begin(), p.rows.end(), p.first_row.begin() + 1);
  p.N = p.first_row[Pz];

  u.positions.resize(Pz);
  for (std::size_t j = 0; j < Pz; ++j) u.positions[j].resize(static_cast<std::size_t>(p.rows[j]) * 8);
  std::memcpy(u.positions[static_cast<std::size_t>(p.R)].data(), positions.data(), positions.size() * 8);
  add(u.gather.run(spans(u.positions)));
  std::vector<std::int64_t> all(static_cast<std::size_t>(p.N));
  for (std::size_t j = 0; j < Pz; ++j)
    std::memcpy(all.data() + p.first_row[j], u.positions[j].data(), u.positions[j].size());
  std::vector<std::int64_t> order(all.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::int64_t a, std::int64_t b) { return all[static_cast<std::size_t>(a)] < all[static_cast<std::size_t>(b)]; });
  u.slot.assign(all.size(), 0);
  u.all_positions.resize(all.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    u.slot[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
    u.all_positions[i] = all[static_cast<std::size_t>(order[i])];
  }
  for (std::size_t i = 1; i < u.all_positions.size(); ++i)
    if (u.all_positions[i] == u.all_positions[i - 1])
      bad("position " + std::to_string(u.all_positions[i]) + " is held by two rows of the sequence (shards must not overlap)");
  return p;
}

// Step 3: each field's rows of this rank go to the head split, and come back as the whole
// sequence in position order: dst[f] = [N, count, width] in the field's wire type.
void to_heads(ring::UlyssesState& u, const Plan& p, std::span<const Field> fields,
              std::span<std::vector<std::byte>* const> dst, collectives::ExchangeStats& moved) {
  const auto Pz = static_cast<std::size_t>(p.P);
  std::vector<std::size_t> row_bytes(fields.size());  // of one row of a field, after the split
  std::size_t per_row = 0;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    row_bytes[f] = static_cast<std::size_t>(p.count(fields[f].kv) * fields[f].width) * size_of(fields[f].wire);
    per_row += row_bytes[f];
  }
  u.out.resize(Pz);
  u.in.resize(Pz);
  for (int j = 0; j < p.P; ++j) {
    auto& b = u.out[static_cast<std::size_t>(j)];
    b.resize(static_cast<std::size_t>(p.n) * per_row);
    std::size_t at = 0;
    for (std::size_t f = 0; f < fields.size(); ++f) {
      const Field& fd = fields[f];
      pack_heads(fd.src, p.n, fd.heads, fd.width, p.first(j, fd.kv), p.count(fd.kv), fd.wire, b.data() + at);
      at += static_cast<std::size_t>(p.n) * row_bytes[f];
    }
    u.in[static_cast<std::size_t>(j)].resize(static_cast<std::size_t>(p.rows[static_cast<std::size_t>(j)]) * per_row);
  }
  const std::vector<std::span<const std::byte>> send(u.out.begin(), u.out.end());
  const std::vector<std::span<std::byte>> recv(u.in.begin(), u.in.end());
  const auto s = u.a2a.run(send, recv);
  moved.bytes_sent += s.bytes_sent;
  moved.wait_seconds += s.wait_seconds;
  for (std::size_t f = 0; f < fields.size(); ++f) dst[f]->resize(static_cast<std::size_t>(p.N) * row_bytes[f]);
  for (std::size_t j = 0; j < Pz; ++j) {
    const std::byte* b = u.in[j].data();
    const auto nj = static_cast<std::size_t>(p.rows[j]);
    for (std::size_t f = 0; f < fields.size(); ++f) {
      for (std::size_t i = 0; i < nj; ++i) {
        const auto s_i = static_cast<std::size_t>(u.slot[static_cast<std::size_t>(p.first_row[j]) + i]);
        std::memcpy(dst[f]->data() + s_i * row_bytes[f], b + i * row_bytes[f], row_bytes[f]);
      }
      b += nj * row_bytes[f];
    }
  }
}

// Step 5: fields of the whole sequence in position order ([N, count, width] fp32, src)
// go back to the rows' ranks: out[f] ([n, heads, width], zeroed here) gets rank j's heads
// added at first(j). A K/V head that several ranks held (replicated) is the sum of their
// shares, added in rank order.
void to_rows(ring::UlyssesState& u, const Plan& p, std::span<const Field> fields, std::span<float* const> out,
             collectives::ExchangeStats& moved) {
  const auto Pz = static_cast<std::size_t>(p.P);
  std::vector<std::size_t> row_floats(fields.size());
  std::size_t per_row = 0;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    row_floats[f] = static_cast<std::size_t>(p.count(fields[f].kv) * fields[f].width);
    per_row += row_floats[f];
  }
  for (std::size_t j = 0; j < Pz; ++j) {
    const auto nj = static_cast<std::size_t>(p.rows[j]);
    auto& b = u.out[j];
    b.resize(nj * per_row * 4);
    float* w = reinterpret_cast<float*>(b.data());
    for (std::size_t f = 0; f < fields.size(); ++f)
      for (std::size_t i = 0; i < nj; ++i) {
        const auto s_i = static_cast<std::size_t>(u.slot[static_cast<std::size_t>(p.first_row[j]) + i]);
        std::memcpy(w, fields[f].src + s_i * row_floats[f], row_floats[f] * 4);
        w += row_floats[f];
      }
    u.in[j].resize(static_cast<std::size_t>(p.n) * per_row * 4);
  }
  const std::vector<std::span<const std::byte>> send(u.out.begin(), u.out.end());
  const std::vector<std::span<std::byte>> recv(u.in.begin(), u.in.end());
  const auto s = u.a2a.run(send, recv);
  moved.bytes_sent += s.bytes_sent;
  moved.wait_seconds += s.wait_seconds;
  const auto n = static_cast<std::size_t>(p.n);
  for (std::size_t f = 0; f < fields.size(); ++f)
    std::fill(out[f], out[f] + n * static_cast<std::size_t>(fields[f].heads * fields[f].width), 0.0f);
  for (int j = 0; j < p.P; ++j) {
    const float* r = reinterpret_cast<const float*>(u.in[static_cast<std::size_t>(j)].data());
    for (std::size_t f = 0; f < fields.size(); ++f) {
      const auto stride = static_cast<std::size_t>(fields[f].heads * fields[f].width);
      const auto at = static_cast<std::size_t>(p.first(j, fields[f].kv) * fields[f].width);
      for (std::size_t i = 0; i < n; ++i) {
        float* d = out[f] + i * stride + at;
        for (std::size_t e = 0; e < row_floats[f]; ++e) d[e] += r[e];
        r += row_floats[f];
      }
    }
  }
}

template <class Stats>
Stats finish(Stats st, const collectives::ExchangeStats& moved, Clock::time_point start) {
  st.bytes_sent = moved.bytes_sent;
  st.wait_seconds = moved.wait_seconds;
  st.seconds = since(start);
  return st;
}

ring::UlyssesState& state_of(Ring& ring, Ring::Impl& im) {
  if (!im.ulysses) im.ulysses = std::make_unique<ring::UlyssesState>(*im.transport, RingInternals::max_frame_bytes(ring));
  return *im.ulysses;
}

}  // namespace

ForwardStats Ring::forward_ulysses(const AttentionSpec& spec, std::span<const float> q, std::span<const float> k,
                                   std::span<const float> v, std::span<const std::int64_t> positions, std::span<float> o,
                                   std::span<float> lse) {
  auto& im = *impl_;
  const auto start = Clock::now();
  im.check_usable();
  const ring::CheckedCall fc = ring::check_call(im, "forward_ulysses", spec, q, k, v, positions, std::nullopt, o, lse);
  const float scale = fc.kernel.config().scale;  // resolved: every rank compares it
  ring::UlyssesState& u = state_of(*this, im);
  collectives::ExchangeStats moved;
  ForwardStats st;
  try {
    const Plan p = plan_call(*this, im, u, moved, "forward_ulysses", ring::call_spec(spec, scale), positions);
    const std::int64_t D = spec.head_dim;
    const Field in[] = {{q.data(), spec.heads, D, false, spec.dtype},
                        {k.data(), spec.kv_heads, D, true, spec.dtype},
                        {v.data(), spec.kv_heads, D, true, spec.dtype}};
    std::vector<std::byte>* const seq[] = {&u.q, &u.k, &u.v};
    to_heads(u, p, in, seq, moved);

    BlockAttention& kernel = im.kernel_for(p.local(spec, scale));  // step 4
    const Positions all = Positions::from_sorted(u.all_positions.data(), p.N);
    u.state.reset(p.N, p.h, D);
    const auto t0 = Clock::now();
    {
      const ring::BusyKernel busy(*im.transport, kernel);
      st.useful_flops += kernel.fold(u.q.data(), all, u.k.data(), u.v.data(), all, u.state).useful_flops;
    }
    u.o.resize(static_cast<std::size_t>(p.N * p.h * D));
    u.lse.resize(static_cast<std::size_t>(p.N * p.h));
    finalize(u.state, u.o.data(), u.lse.data());
    st.compute_seconds += since(t0);
    st.steps = 1;

    std::vector<Field> back = {{u.o.data(), spec.heads, D, false, DType::f32}};  // step 5
    std::vector<float*> to = {o.data()};
    if (!lse.empty()) {
      back.push_back({u.lse.data(), spec.heads, 1, false, DType::f32});
      to.push_back(lse.data());
    }
    to_rows(u, p, back, to, moved);
  } catch (...) {
    ring::fail_call(im);  // a refusal found alike on every rank (InvalidArgument) leaves the ring usable
  }
  return finish(st, moved, start);
}

BackwardStats Ring::backward_ulysses(const AttentionSpec& spec, std::span<const float> q, std::span<const float> k,
                                     std::span<const float> v, std::span<const std::int64_t> positions,
                                     std::span<const float> o, std::span<const float> lse, std::span<const float> d_o,
                                     std::span<float> dq, std::span<float> dk, std::span<float> dv) {
  auto& im = *impl_;
  const auto start = Clock::now();
  im.check_usable();
  const ring::CheckedCall fc = ring::check_call(im, "backward_ulysses", spec, q, k, v, positions, std::nullopt, o, lse);
  const auto rows = static_cast<std::int64_t>(positions.size());
  ring::check_backward_inputs(who(*this, "backward_ulysses"), spec, rows, q, k, v, o, lse, d_o, dq, dk, dv);
  const float scale = fc.kernel.config().scale;
  const std::int64_t H = spec.heads, D = spec.head_dim;
  ring::UlyssesState& u = state_of(*this, im);
  u.delta.resize(static_cast<std::size_t>(rows * H));  // D_i = dO_i . O_i, per row and head, on the rows' rank
  attention_backward_delta(o.data(), d_o.data(), rows, H, D, u.delta.data(), im.options.threads);
  collectives::ExchangeStats moved;
  BackwardStats st;
  try {
    ring::CallSpec cs = ring::call_spec(spec, scale);
    cs.backward = true;  // a rank in forward_ulysses() meanwhile is refused by every rank alike
    const Plan p = plan_call(*this, im, u, moved, "backward_ulysses", cs, positions);
    const Field in[] = {{q.data(), H, D, false, spec.dtype},          {k.data(), spec.kv_heads, D, true, spec.dtype},
                        {v.data(), spec.kv_heads, D, true, spec.dtype}, {d_o.data(), H, D, false, spec.dtype},
                        {lse.data(), H, 1, false, DType::f32},          {u.delta.data(), H, 1, false, DType::f32}};
    std::vector<std::byte>* const seq[] = {&u.q, &u.k, &u.v, &u.d_o, &u.lse_seq, &u.delta_seq};
    to_heads(u, p, in, seq, moved);

    BlockAttentionBackward& kernel = im.backward_kernel_for(p.local(spec, scale));
    const Positions all = Positions::from_sorted(u.all_positions.data(), p.N);
    u.dq.assign(static_cast<std::size_t>(p.N * p.h * D), 0.0f);
    u.dk.assign(static_cast<std::size_t>(p.N * p.hk * D), 0.0f);
    u.dv.assign(u.dk.size(), 0.0f);
    const auto t0 = Clock::now();
    {
      const ring::BusyKernel busy(*im.transport, kernel);
      st.useful_flops += kernel
                             .accumulate(u.q.data(), all, {}, u.k.data(), u.v.data(), all, {}, u.d_o.data(),
                                         reinterpret_cast<const float*>(u.lse_seq.data()),
                                         reinterpret_cast<const float*>(u.delta_seq.data()), u.dq.data(), u.dk.data(),
                                         u.dv.data())
                             .useful_flops;
    }
    st.compute_seconds += since(t0);
    st.steps = 1;
    const Field back[] = {{u.dq.data(), H, D, false, DType::f32},
                          {u.dk.data(), spec.kv_heads, D, true, DType::f32},
                          {u.dv.data(), spec.kv_heads, D, true, DType::f32}};
    float* const to[] = {dq.data(), dk.data(), dv.data()};
    to_rows(u, p, back, to, moved);
  } catch (...) {
    ring::fail_call(im);  // a refusal found alike on every rank (InvalidArgument) leaves the ring usable
  }
  return finish(st, moved, start);
}

}  // namespace ringattn
