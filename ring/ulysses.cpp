// Ring::forward_ulysses (include/ringattn/ring.hpp): Ulysses' schedule, its steps in
// ring/ulysses.hpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

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

// What every rank says of its call, compared across the ranks before any row moves.
constexpr std::size_t kHeaderFields = 8;
std::vector<std::byte> call_header(const AttentionSpec& s, std::int64_t rows, float scale) {
  std::uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, 4);
  const std::int64_t f[kHeaderFields] = {rows,       s.heads, s.kv_heads, s.head_dim, static_cast<std::int64_t>(s.dtype),
                                         static_cast<std::int64_t>(s.mask.kind), s.mask.window, scale_bits};
  std::vector<std::byte> b(kHeaderFields * 8);
  for (std::size_t i = 0; i < kHeaderFields; ++i) put_le<std::int64_t>(b.data() + 8 * i, f[i]);
  return b;
}
std::int64_t header_field(const std::vector<std::byte>& b, std::size_t i) { return get_le<std::int64_t>(b.data() + 8 * i); }

std::string spec_text(const std::vector<std::byte>& b) {
  float scale = 0;
  const auto bits = static_cast<std::uint32_t>(header_field(b, 7));
  std::memcpy(&scale, &bits, 4);
  return "heads " + std::to_string(header_field(b, 1)) + "/" + std::to_string(header_field(b, 2)) + ", head_dim " +
         std::to_string(header_field(b, 3)) + ", dtype " + std::string(to_string(static_cast<DType>(header_field(b, 4)))) +
         ", mask " + std::to_string(header_field(b, 5)) + "/" + std::to_string(header_field(b, 6)) + ", scale " +
         std::to_string(scale);
}

// Copies heads [h0, h0 + count) of `rows` rows of a [rows, heads, d] fp32 tensor into
// dst as [rows, count, d] in `dtype`.
void pack_heads(const float* src, std::int64_t rows, std::int64_t heads, std::int64_t d, std::int64_t h0,
                std::int64_t count, DType dtype, std::byte* dst) {
  const std::int64_t w = count * d;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* s = src + (r * heads + h0) * d;
    if (dtype == DType::bf16)
      to_bf16(s, reinterpret_cast<std::uint16_t*>(dst) + r * w, w);
    else
      std::memcpy(dst + static_cast<std::size_t>(r * w) * 4, s, static_cast<std::size_t>(w) * 4);
  }
}

}  // namespace

ForwardStats Ring::forward_ulysses(const AttentionSpec& spec, std::span<const float> q, std::span<const float> k,
                                   std::span<const float> v, std::span<const std::int64_t> positions, std::span<float> o,
                                   std::span<float> lse) {
  auto& im = *impl_;
  const auto start = Clock::now();
  im.check_usable();
  const ring::CheckedCall fc = ring::check_call(im, "forward_ulysses", spec, q, k, v, positions, std::nullopt, o, lse);
  const int P = world_size(), R = rank();
  const std::int64_t H = spec.heads, KV = spec.kv_heads, D = spec.head_dim;
  auto bad = [&](const std::string& what) {
    throw InvalidArgument("rank " + std::to_string(R) + ": forward_ulysses: " + what);
  };
  if (H % P != 0)
    bad(std::to_string(H) + " query heads do not split over " + std::to_string(P) + " ranks (Ulysses shards heads: use forward())");
  const std::int64_t h = H / P, group = H / KV;
  if (h % group != 0 && group % h != 0)
    bad("each rank's " + std::to_string(h) + " query heads would read parts of K/V heads shared by " +
        std::to_string(group) + " query heads (heads/P and heads/kv_heads must divide one another)");
  const std::int64_t hk = h % group == 0 ? h / group : 1;  // K/V heads a rank's query heads read
  auto kv_first = [&](int j) { return (static_cast<std::int64_t>(j) * h) / group; };
  const auto n = static_cast<std::int64_t>(positions.size());
  const float scale = fc.kernel.config().scale;  // resolved: every rank compares it
  const std::size_t es = spec.dtype == DType::bf16 ? 2 : 4;

  if (!im.ulysses) im.ulysses = std::make_unique<ring::UlyssesState>(*im.transport, RingInternals::max_frame_bytes(*this));
  ring::UlyssesState& u = *im.ulysses;
  const auto Pz = static_cast<std::size_t>(P);
  ForwardStats st;
  collectives::ExchangeStats moved;  // this call's
  auto add = [&moved](const collectives::ExchangeStats& s) {
    moved.bytes_sent += s.bytes_sent;
    moved.wait_seconds += s.wait_seconds;
  };
  auto spans = [](std::vector<std::vector<std::byte>>& blocks) {
    return std::vector<std::span<std::byte>>(blocks.begin(), blocks.end());
  };
  try {
    // 1. headers: every shard's rows, and one spec on every rank (each rank sees every
    //    header, so all refuse a difference alike and the ring stays usable)
    u.headers.assign(Pz, std::vector<std::byte>(kHeaderFields * 8));
    u.headers[static_cast<std::size_t>(R)] = call_header(spec, n, scale);
    add(u.gather.run(spans(u.headers)));
    std::vector<std::int64_t> rows(Pz);
    for (int j = 0; j < P; ++j) {
      const auto& hj = u.headers[static_cast<std::size_t>(j)];
      for (std::size_t f = 1; f < kHeaderFields; ++f)
        if (header_field(hj, f) != header_field(u.headers[0], f))
          bad("rank " + std::to_string(j) + " calls with " + spec_text(hj) + ", rank 0 with " + spec_text(u.headers[0]));
      rows[static_cast<std::size_t>(j)] = header_field(hj, 0);
      if (rows[static_cast<std::size_t>(j)] < 1 || rows[static_cast<std::size_t>(j)] > im.options.limits.max_rows)
        bad("rank " + std::to_string(j) + " calls with " + std::to_string(rows[static_cast<std::size_t>(j)]) +
            " rows, outside 1.." + std::to_string(im.options.limits.max_rows));
    }
    const std::int64_t N = std::accumulate(rows.begin(), rows.end(), std::int64_t{0});

    // 2. positions, then the order of the whole sequence (shards of any layout)
    u.positions.resize(Pz);
    for (int j = 0; j < P; ++j) u.positions[static_cast<std::size_t>(j)].resize(static_cast<std::size_t>(rows[static_cast<std::size_t>(j)]) * 8);
    std::memcpy(u.positions[static_cast<std::size_t>(R)].data(), positions.data(), positions.size() * 8);
    add(u.gather.run(spans(u.positions)));
    std::vector<std::int64_t> all(static_cast<std::size_t>(N));
    {
      std::size_t at = 0;
      for (int j = 0; j < P; ++j) {
        std::memcpy(all.data() + at, u.positions[static_cast<std::size_t>(j)].data(), u.positions[static_cast<std::size_t>(j)].size());
        at += static_cast<std::size_t>(rows[static_cast<std::size_t>(j)]);
      }
    }
    std::vector<std::int64_t> order(all.size());
    std::iota(order.begin(), order.end(), std::int64_t{0});
    std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return all[static_cast<std::size_t>(a)] < all[static_cast<std::size_t>(b)]; });
    u.slot.assign(all.size(), 0);
    u.all_positions.resize(all.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      u.slot[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
      u.all_positions[i] = all[static_cast<std::size_t>(order[i])];
    }
    for (std::size_t i = 1; i < u.all_positions.size(); ++i)
      if (u.all_positions[i] == u.all_positions[i - 1])
        bad("position " + std::to_string(u.all_positions[i]) + " is held by two rows of the sequence (shards must not overlap)");
    std::vector<std::int64_t> first_row(Pz + 1, 0);  // rank j's rows start at first_row[j] in `all`
    std::partial_sum(rows.begin(), rows.end(), first_row.begin() + 1);

    // 3. all-to-all: to rank j its query heads and the K/V heads they read, of this rank's rows
    const std::int64_t qw = h * D, kw = hk * D;  // elements per row
    u.out.resize(Pz);
    u.in.resize(Pz);
    for (int j = 0; j < P; ++j) {
      auto& b = u.out[static_cast<std::size_t>(j)];
      b.resize(static_cast<std::size_t>(n * (qw + 2 * kw)) * es);
      pack_heads(q.data(), n, H, D, j * h, h, spec.dtype, b.data());
      pack_heads(k.data(), n, KV, D, kv_first(j), hk, spec.dtype, b.data() + static_cast<std::size_t>(n * qw) * es);
      pack_heads(v.data(), n, KV, D, kv_first(j), hk, spec.dtype, b.data() + static_cast<std::size_t>(n * (qw + kw)) * es);
      u.in[static_cast<std::size_t>(j)].resize(static_cast<std::size_t>(rows[static_cast<std::size_t>(j)] * (qw + 2 * kw)) * es);
    }
    {
      const std::vector<std::span<const std::byte>> send(u.out.begin(), u.out.end());
      add(u.a2a.run(send, spans(u.in)));
    }
    // ... laid out as the whole sequence in position order: [N, h, D] and [N, hk, D]
    u.q.resize(static_cast<std::size_t>(N * qw) * es);
    u.k.resize(static_cast<std::size_t>(N * kw) * es);
    u.v.resize(static_cast<std::size_t>(N * kw) * es);
    for (int j = 0; j < P; ++j) {
      const std::byte* b = u.in[static_cast<std::size_t>(j)].data();
      const std::int64_t nj = rows[static_cast<std::size_t>(j)];
      for (std::int64_t i = 0; i < nj; ++i) {
        const auto s = static_cast<std::size_t>(u.slot[static_cast<std::size_t>(first_row[static_cast<std::size_t>(j)] + i)]);
        std::memcpy(u.q.data() + s * static_cast<std::size_t>(qw) * es, b + static_cast<std::size_t>(i * qw) * es, static_cast<std::size_t>(qw) * es);
        std::memcpy(u.k.data() + s * static_cast<std::size_t>(kw) * es, b + static_cast<std::size_t>(nj * qw + i * kw) * es,
                    static_cast<std::size_t>(kw) * es);
        std::memcpy(u.v.data() + s * static_cast<std::size_t>(kw) * es, b + static_cast<std::size_t>(nj * (qw + kw) + i * kw) * es,
                    static_cast<std::size_t>(kw) * es);
      }
    }

    // 4. the kernel over the whole sequence for this rank's heads
    AttentionSpec local = spec;
    local.heads = h;
    local.kv_heads = hk;
    local.scale = scale;
    BlockAttention& kernel = im.kernel_for(local);
    const Positions all_pos = Positions::from_sorted(u.all_positions.data(), N);
    u.state.reset(N, h, D);
    const auto t0 = Clock::now();
    {
      const ring::BusyKernel busy(*im.transport, kernel);
      const FoldStats fs = kernel.fold(u.q.data(), all_pos, u.k.data(), u.v.data(), all_pos, u.state);
      st.useful_flops += fs.useful_flops;
    }
    u.o.resize(static_cast<std::size_t>(N * qw));
    u.lse.resize(static_cast<std::size_t>(N * h));
    finalize(u.state, u.o.data(), u.lse.data());
    st.compute_seconds += since(t0);
    st.steps = 1;

    // 5. all-to-all back: to rank j, its rows of O and lse for this rank's heads (fp32)
    for (int j = 0; j < P; ++j) {
      const std::int64_t nj = rows[static_cast<std::size_t>(j)];
      auto& b = u.out[static_cast<std::size_t>(j)];
      b.resize(static_cast<std::size_t>(nj * (qw + h)) * 4);
      for (std::int64_t i = 0; i < nj; ++i) {
        const auto s = static_cast<std::size_t>(u.slot[static_cast<std::size_t>(first_row[static_cast<std::size_t>(j)] + i)]);
        std::memcpy(b.data() + static_cast<std::size_t>(i * qw) * 4, u.o.data() + s * static_cast<std::size_t>(qw), static_cast<std::size_t>(qw) * 4);
        std::memcpy(b.data() + static_cast<std::size_t>(nj * qw + i * h) * 4, u.lse.data() + s * static_cast<std::size_t>(h),
                    static_cast<std::size_t>(h) * 4);
      }
      u.in[static_cast<std::size_t>(j)].resize(static_cast<std::size_t>(n * (qw + h)) * 4);
    }
    {
      const std::vector<std::span<const std::byte>> send(u.out.begin(), u.out.end());
      add(u.a2a.run(send, spans(u.in)));
    }
    for (int j = 0; j < P; ++j) {
      const std::byte* b = u.in[static_cast<std::size_t>(j)].data();
      for (std::int64_t i = 0; i < n; ++i) {
        std::memcpy(o.data() + static_cast<std::size_t>(i * H + j * h) * static_cast<std::size_t>(D),
                    b + static_cast<std::size_t>(i * qw) * 4, static_cast<std::size_t>(qw) * 4);
        if (!lse.empty())
          std::memcpy(lse.data() + static_cast<std::size_t>(i * H + j * h), b + static_cast<std::size_t>(n * qw + i * h) * 4,
                      static_cast<std::size_t>(h) * 4);
      }
    }
  } catch (const InvalidArgument&) {
    throw;  // found alike on every rank, before any row moved: the ring stays usable
  } catch (const NetworkError& e) {
    im.mark_broken(e.what());
    throw;
  } catch (const std::exception& e) {
    if (!im.transport->failure().empty()) im.mark_broken(e.what());
    throw;
  }
  st.bytes_sent = moved.bytes_sent;
  st.wait_seconds = moved.wait_seconds;
  st.seconds = since(start);
  return st;
}

}  // namespace ringattn
