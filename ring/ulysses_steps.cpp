// The steps of Ulysses' schedule (ring/ulysses.hpp) that forward and backward by Schedule::ulysses
// and the hybrid schedule share: the plan (call headers and positions all-gathered), the
// head split and its way back.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "ring/block_format.hpp"
#include "ring/ulysses.hpp"
#include "ringattn/byte_order.hpp"
#include "ringattn/error.hpp"

namespace ringattn::ring {

namespace {

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

}  // namespace

// Steps 1 and 2 (ulysses.hpp): the head split's conditions, the call headers compared,
// the positions gathered and ordered.
Plan plan_call(UlyssesState& u, const std::string& who, std::int64_t max_rows, collectives::ExchangeStats& moved,
               const CallSpec& cs, std::span<const std::int64_t> positions, std::span<const std::int32_t> documents) {
  auto bad = [&](const std::string& what) { throw InvalidArgument(who + what); };
  auto add = [&moved](const collectives::ExchangeStats& s) {
    moved.bytes_sent += s.bytes_sent;
    moved.wait_seconds += s.wait_seconds;
  };
  auto spans = [](std::vector<std::vector<std::byte>>& blocks) {
    return std::vector<std::span<std::byte>>(blocks.begin(), blocks.end());
  };
  Plan p;
  p.P = u.t.world();
  p.R = u.t.rank();
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
      bad("rank " + std::to_string(u.t.ring_rank(static_cast<int>(j))) + "'s call header: " + e);
    if (j == 0) first = theirs;
    if (!ring::compare_specs(first.spec, 0, theirs.spec, static_cast<int>(j)).empty())
      bad("rank " + std::to_string(u.t.ring_rank(static_cast<int>(j))) + " calls with " + theirs.spec.describe() +
          ", rank " + std::to_string(u.t.ring_rank(0)) + " with " + first.spec.describe());
    p.rows[j] = get_le<std::int64_t>(u.headers[j].data() + ring::kBlockPrefixBytes);
    if (p.rows[j] < 1 || p.rows[j] > max_rows)
      bad("rank " + std::to_string(u.t.ring_rank(static_cast<int>(j))) + " calls with " + std::to_string(p.rows[j]) +
          " rows, outside 1.." +
          std::to_string(max_rows));
  }
  p.first_row.assign(Pz + 1, 0);
  std::partial_sum(p.rows.begin(), p.rows.end(), p.first_row.begin() + 1);
  p.N = p.first_row[Pz];

  // Each rank's positions (int64), then its rows' documents (int32) when the call has them.
  const std::size_t per_row = cs.documents ? 12 : 8;
  if (cs.documents != !documents.empty() || (cs.documents && documents.size() != positions.size()))
    bad("documents: " + std::to_string(documents.size()) + " ids for " + std::to_string(positions.size()) + " rows");
  u.positions.resize(Pz);
  for (std::size_t j = 0; j < Pz; ++j) u.positions[j].resize(static_cast<std::size_t>(p.rows[j]) * per_row);
  auto& own = u.positions[static_cast<std::size_t>(p.R)];
  std::memcpy(own.data(), positions.data(), positions.size() * 8);
  if (cs.documents) std::memcpy(own.data() + positions.size() * 8, documents.data(), documents.size() * 4);
  add(u.gather.run(spans(u.positions)));
  std::vector<std::int64_t> all(static_cast<std::size_t>(p.N));
  std::vector<std::int32_t> docs(cs.documents ? all.size() : 0);
  for (std::size_t j = 0; j < Pz; ++j) {
    const auto nj = static_cast<std::size_t>(p.rows[j]);
    std::memcpy(all.data() + p.first_row[j], u.positions[j].data(), nj * 8);
    if (cs.documents) std::memcpy(docs.data() + p.first_row[j], u.positions[j].data() + nj * 8, nj * 4);
  }
  std::vector<std::int64_t> order(all.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::int64_t a, std::int64_t b) { return all[static_cast<std::size_t>(a)] < all[static_cast<std::size_t>(b)]; });
  u.slot.assign(all.size(), 0);
  u.all_positions.resize(all.size());
  u.all_documents.resize(docs.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    u.slot[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
    u.all_positions[i] = all[static_cast<std::size_t>(order[i])];
    if (cs.documents) u.all_documents[i] = docs[static_cast<std::size_t>(order[i])];
  }
  for (std::size_t i = 1; i < u.all_positions.size(); ++i) {
    if (u.all_positions[i] == u.all_positions[i - 1])
      bad("position " + std::to_string(u.all_positions[i]) + " is held by two rows of the sequence (shards must not overlap)");
    if (cs.documents && u.all_documents[i] < u.all_documents[i - 1])
      bad("the document ids decrease along the sequence at position " + std::to_string(u.all_positions[i]) + " (" +
          std::to_string(u.all_documents[i - 1]) + " then " + std::to_string(u.all_documents[i]) +
          "): each document is one run of positions (shard_documents gives such shards)");
  }
  return p;
}

// Step 3: each field's rows of this rank go to the head split, and come back as the whole
// sequence in position order: dst[f] = [N, count, width] in the field's wire type.
void to_heads(UlyssesState& u, const Plan& p, std::span<const Field> fields,
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
void to_rows(UlyssesState& u, const Plan& p, std::span<const Field> fields, std::span<float* const> out,
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

}  // namespace ringattn::ring
