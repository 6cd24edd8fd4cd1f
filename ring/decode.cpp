// Ring::decode (include/ringattn/ring.hpp): one decode step on stationary KV shards.
//
//   gather   every rank's QUERY payload (prefix, positions, sequences, then per token its
//            q, k, v in the call's dtype) goes once around the ring: P-1 neighbour steps,
//            each relaying the payload that arrived in the step before (its CRC reused);
//   store    each token's k and v are appended to the cache of decode_store_rank();
//   compute  this rank's partial (m, l, o) of every token over its own cache rows of the
//            token's sequence (kernels/cache_attention.hpp), one origin's tokens at a time,
//            in the order the reduce-scatter needs them;
//   reduce   a ring reduce-scatter of the partials: at step s this rank sends origin
//            (rank-s-1)'s partial, merged with what came for it, and receives origin
//            (rank-s-2)'s; after P-1 steps its own tokens' states are complete.
// The next origin's partial is computed while the previous one travels. Everything a peer
// sends is checked before it is used (frame, prefix and spec, origin, sizes, positions and
// sequences >= 0); a token whose position does not continue its sequence on the rank that
// stores it fails the call on every rank.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>

#include "kernels/dispatch.hpp"
#include "net/byte_order.hpp"
#include "ringattn/error.hpp"
#include "ringattn/kv_cache.hpp"
#include "ringattn/ring.hpp"
#include "ring/block_format.hpp"
#include "ring/ring_impl.hpp"

namespace ringattn {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int mod(int a, int p) { return ((a % p) + p) % p; }

// One decode call's context: the spec, the sizes and the way to fail on the wire.
struct DecodeCall {
  net::Transport& t;
  ring::CallSpec cs;
  std::uint64_t call = 0;
  std::int64_t H = 0, KH = 0, D = 0;
  std::size_t cols = 0, esz = 0;

  int rank() const { return t.rank(); }
  int world() const { return t.world(); }
  net::BlockLayout layout(std::size_t rows) const {
    return net::BlockLayout::query(cs.dtype, static_cast<std::uint32_t>(cols), static_cast<std::uint32_t>(rows));
  }

  [[noreturn]] void refuse(FailureCause cause, int origin, const std::string& what) {
    const std::string msg = "rank " + std::to_string(rank()) + ": decode call " + std::to_string(call) + ": " + what;
    t.abort(cause, origin, msg.substr(msg.find(": ") + 2));
    throw NetworkError(msg, cause, origin);
  }

  // This rank's tokens as a QUERY payload.
  void encode(std::vector<std::byte>& out, std::span<const std::int32_t> seqs, std::span<const std::int64_t> pos,
              std::span<const float> q, std::span<const float> k, std::span<const float> v) {
    const net::BlockLayout L = layout(pos.size());
    out.resize(L.bytes());
    const auto prefix = ring::encode_prefix({cs, rank()});
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
        if (cs.dtype == DType::bf16) to_bf16(parts[p], reinterpret_cast<std::uint16_t*>(row), static_cast<std::int64_t>(lens[p]));
        else std::memcpy(row, parts[p], lens[p] * 4);
        row += lens[p] * esz;
      }
    }
  }

  // A received QUERY: checked before anything reads it. Returns its token count.
  std::size_t check_query(const net::FrameHeader& h, const std::vector<std::byte>& buf, int step, int expect) {
    const int pred = t.predecessor();
    const std::string from = "the queries from predecessor rank " + std::to_string(pred) + " at step " + std::to_string(step);
    if (h.kind != net::FrameKind::query)
      refuse(FailureCause::protocol, pred, from + " are a " + std::string(net::to_string(h.kind)) + " frame, not QUERY");
    if (h.job_id != call || h.step != static_cast<std::uint64_t>(step))
      refuse(FailureCause::mismatch, pred,
             from + " belong to call " + std::to_string(h.job_id) + " step " + std::to_string(h.step) +
                 " (the ranks are not making the same calls in the same order: every rank calls decode once per "
                 "layer and step, with or without tokens)");
    ring::BlockPrefix p;
    if (std::string err = ring::decode_prefix(std::span<const std::byte>(buf.data(), h.payload_bytes), p); !err.empty())
      refuse(FailureCause::protocol, pred, from + " have a bad prefix: " + err);
    if (std::string err = ring::compare_specs(cs, rank(), p.spec, p.origin); !err.empty())
      refuse(FailureCause::mismatch, p.origin, from + " do not match this call: " + err);
    if (p.origin != expect)
      refuse(FailureCause::protocol, pred, from + " are rank " + std::to_string(p.origin) + "'s, expected rank " +
                                               std::to_string(expect) + "'s");
    const net::BlockLayout L = layout(h.rows);
    if (h.dtype != cs.dtype || h.cols != cols || h.payload_bytes != L.bytes())
      refuse(FailureCause::protocol, pred, from + " have a frame that does not match their own description");
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
};

// The row layout of a partial state on the wire (STATE frames): per token o [H*D], m [H], l [H].
void put_state(std::vector<std::byte>& out, const OnlineSoftmaxState& s) {
  const std::size_t H = static_cast<std::size_t>(s.heads), D = static_cast<std::size_t>(s.head_dim);
  const std::size_t row = H * (D + 2);
  out.resize(static_cast<std::size_t>(s.rows) * row * 4);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r) {
    std::byte* b = out.data() + r * row * 4;
    std::memcpy(b, s.o.data() + r * H * D, H * D * 4);
    std::memcpy(b + H * D * 4, s.m.data() + r * H, H * 4);
    std::memcpy(b + H * (D + 1) * 4, s.l.data() + r * H, H * 4);
  }
}

void get_state(const std::vector<std::byte>& in, OnlineSoftmaxState& s) {
  const std::size_t H = static_cast<std::size_t>(s.heads), D = static_cast<std::size_t>(s.head_dim);
  const std::size_t row = H * (D + 2);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r) {
    const std::byte* b = in.data() + r * row * 4;
    std::memcpy(s.o.data() + r * H * D, b, H * D * 4);
    std::memcpy(s.m.data() + r * H, b + H * D * 4, H * 4);
    std::memcpy(s.l.data() + r * H, b + H * (D + 1) * 4, H * 4);
  }
}

}  // namespace

DecodeStats Ring::decode(const AttentionSpec& spec, KVCache& cache, std::span<const std::int32_t> sequences,
                         std::span<const std::int64_t> positions, std::span<const float> q, std::span<const float> k,
                         std::span<const float> v, std::span<float> o, std::span<float> lse) {
  auto& im = *impl_;
  const auto start = Clock::now();
  im.check_usable();
  const int R = rank(), P = world_size();
  const auto n = static_cast<std::int64_t>(positions.size());
  auto bad = [&](const std::string& what) { throw InvalidArgument("rank " + std::to_string(R) + ": decode: " + what); };
  // Everything is checked before anything is sent: a bad call leaves the ring usable.
  im.check_limits(spec, n, "tokens", bad);
  kernels::CacheAttention& kernel = im.cache_kernel_for(spec);  // validates heads, kv_heads, head_dim, mask, scale
  const std::int64_t H = spec.heads, KH = spec.kv_heads, D = spec.head_dim;
  if (cache.kv_heads() != KH || cache.head_dim() != D || cache.dtype() != spec.dtype)
    bad("the cache holds " + std::to_string(cache.kv_heads()) + " KV heads of " + std::to_string(cache.head_dim()) +
        " in " + std::string(to_string(cache.dtype())) + " but the call's spec has " + std::to_string(KH) + " of " +
        std::to_string(D) + " in " + std::string(to_string(spec.dtype)) + " (one cache per layer, made for its spec)");
  auto size_is = [&](const char* name, std::size_t got, std::int64_t want) {
    if (static_cast<std::int64_t>(got) != want)
      bad(std::string(name) + " has " + std::to_string(got) + " elements, expected " + std::to_string(want) + " (" +
          std::to_string(n) + " tokens)");
  };
  size_is("sequences", sequences.size(), n);
  size_is("q", q.size(), n * H * D);
  size_is("k", k.size(), n * KH * D);
  size_is("v", v.size(), n * KH * D);
  size_is("o", o.size(), n * H * D);
  if (!lse.empty()) size_is("lse", lse.size(), n * H);
  for (std::int64_t i = 0; i < n; ++i)
    if (sequences[static_cast<std::size_t>(i)] < 0 || positions[static_cast<std::size_t>(i)] < 0)
      bad("token " + std::to_string(i) + ": sequence " + std::to_string(sequences[static_cast<std::size_t>(i)]) +
          " and position " + std::to_string(positions[static_cast<std::size_t>(i)]) + " must be >= 0");
  const auto& ops = kernels::ops_for(kernels::resolve_isa(std::nullopt));
  if (ops.has_non_finite_f32(q.data(), static_cast<std::int64_t>(q.size())) ||
      ops.has_non_finite_f32(k.data(), static_cast<std::int64_t>(k.size())) ||
      ops.has_non_finite_f32(v.data(), static_cast<std::int64_t>(v.size())))
    bad("q, k or v holds NaN or inf (refused before anything was sent)");

  net::Transport& t = *im.transport;
  DecodeCall dc{t, {}, ++im.calls, H, KH, D, static_cast<std::size_t>((H + 2 * KH) * D), dtype_size(spec.dtype)};
  dc.cs.heads = static_cast<std::uint32_t>(H);
  dc.cs.kv_heads = static_cast<std::uint32_t>(KH);
  dc.cs.head_dim = static_cast<std::uint32_t>(D);
  dc.cs.mask = spec.mask;
  dc.cs.dtype = spec.dtype;
  dc.cs.scale = kernel.config().scale;
  auto& b = im.decode;
  b.gathered.resize(static_cast<std::size_t>(P));
  b.partial.resize(static_cast<std::size_t>(P));
  std::vector<std::size_t> count(static_cast<std::size_t>(P), 0);  // tokens per origin
  DecodeStats st;
  std::vector<std::pair<std::int32_t, std::int64_t>> stored;  // sequences appended to, and their rows before
  auto take_back = [&] {
    for (const auto& [seq, rows] : stored) cache.truncate(seq, rows);
  };

  try {
    // 1. Gather: every rank's tokens reach every rank.
    dc.encode(b.gathered[static_cast<std::size_t>(R)], sequences, positions, q, k, v);
    if (spec.dtype == DType::bf16) {  // a finite fp32 beyond bf16's range rounds to inf
      const net::BlockLayout L = dc.layout(static_cast<std::size_t>(n));
      if (ops.has_non_finite_bf16(reinterpret_cast<const std::uint16_t*>(b.gathered[static_cast<std::size_t>(R)].data() + L.body(0)),
                                  static_cast<std::int64_t>(L.rows * dc.cols)))
        bad("q, k or v holds a value beyond bf16's range (about 3.39e38), which bf16 rounds to inf");
    }
    count[static_cast<std::size_t>(R)] = static_cast<std::size_t>(n);
    std::optional<std::uint32_t> crc;
    for (int s = 0; s + 1 < P; ++s) {
      const int send_origin = mod(R - s, P), recv_origin = mod(R - s - 1, P);
      const auto& out = b.gathered[static_cast<std::size_t>(send_origin)];
      net::FrameHeader h;
      h.kind = net::FrameKind::query;
      h.dtype = spec.dtype;
      h.job_id = dc.call;
      h.step = static_cast<std::uint64_t>(s);
      h.rows = static_cast<std::uint32_t>(count[static_cast<std::size_t>(send_origin)]);
      h.cols = static_cast<std::uint32_t>(dc.cols);
      h.payload_bytes = out.size();
      net::Request sreq = t.isend(t.successor(), h, std::span<const std::byte>(out), crc);
      st.bytes_sent += out.size();
      auto& in = b.gathered[static_cast<std::size_t>(recv_origin)];
      net::Request rreq = t.irecv(t.predecessor(), [&in](const net::FrameHeader& fh) {
        if (in.size() < fh.payload_bytes) in.resize(static_cast<std::size_t>(fh.payload_bytes));
        return std::span<std::byte>(in.data(), static_cast<std::size_t>(fh.payload_bytes));
      });
      const auto t0 = Clock::now();
      t.wait(sreq);
      const net::FrameHeader got = t.wait(rreq);
      st.wait_seconds += since(t0);
      count[static_cast<std::size_t>(recv_origin)] = dc.check_query(got, in, s, recv_origin);
      in.resize(static_cast<std::size_t>(got.payload_bytes));
      crc = got.payload_crc;
    }

    // Tokens of every origin, in origin order: their positions, sequences and fp32 q.
    std::vector<std::size_t> first(static_cast<std::size_t>(P) + 1, 0);
    for (int r = 0; r < P; ++r) first[static_cast<std::size_t>(r) + 1] = first[static_cast<std::size_t>(r)] + count[static_cast<std::size_t>(r)];
    const std::size_t T = first.back();
    st.tokens = static_cast<std::int64_t>(T);
    b.positions.resize(T);
    b.sequences.resize(T);
    b.q.resize(T * static_cast<std::size_t>(H * D));
    std::vector<const std::byte*> kv_rows(T);  // each token's k, then v, in the payload (dtype)
    for (int r = 0; r < P; ++r) {
      const auto& buf = b.gathered[static_cast<std::size_t>(r)];
      const net::BlockLayout L = dc.layout(count[static_cast<std::size_t>(r)]);
      for (std::size_t i = 0; i < L.rows; ++i) {
        const std::size_t tok = first[static_cast<std::size_t>(r)] + i;
        b.positions[tok] = L.tag(buf.data(), i);
        b.sequences[tok] = L.group(buf.data(), i);
        const std::byte* row = buf.data() + L.body(0) + i * dc.cols * dc.esz;
        float* qd = b.q.data() + tok * static_cast<std::size_t>(H * D);
        if (spec.dtype == DType::bf16) from_bf16(reinterpret_cast<const std::uint16_t*>(row), qd, H * D);
        else std::memcpy(qd, row, static_cast<std::size_t>(H * D) * 4);
        kv_rows[tok] = row + static_cast<std::size_t>(H * D) * dc.esz;
      }
    }

    // 2. Store: this rank's share of the new tokens, in (sequence, position) order, all
    // checked before any is appended; what was appended is taken back if the call fails.
    {
      std::map<std::int32_t, std::int64_t> last;
      std::vector<std::size_t> mine;
      for (std::size_t tok = 0; tok < T; ++tok)
        if (decode_store_rank(b.sequences[tok], b.positions[tok], P) == R) mine.push_back(tok);
      std::stable_sort(mine.begin(), mine.end(), [&](std::size_t x, std::size_t y) {
        return std::pair(b.sequences[x], b.positions[x]) < std::pair(b.sequences[y], b.positions[y]);
      });
      for (std::size_t tok : mine) {
        const std::int32_t seq = b.sequences[tok];
        auto it = last.find(seq);
        if (it == last.end()) {
          const auto view = cache.view(seq);
          it = last.emplace(seq, view.positions.empty() ? -1 : view.positions.back()).first;
        }
        if (b.positions[tok] <= it->second)
          dc.refuse(FailureCause::local, R,
                    "the token of sequence " + std::to_string(seq) + " at position " +
                        std::to_string(b.positions[tok]) + " (from rank " +
                        std::to_string(std::upper_bound(first.begin(), first.end(), tok) - first.begin() - 1) +
                        ") does not follow the sequence's last position " + std::to_string(it->second) +
                        " on this rank, which stores it: decode positions must continue each sequence");
        it->second = b.positions[tok];
      }
      for (const auto& [seq, unused] : last) stored.emplace_back(seq, cache.rows(seq));
      const std::size_t kv_bytes = static_cast<std::size_t>(KH * D) * dc.esz;
      for (std::size_t tok : mine)
        cache.append_raw(b.sequences[tok], std::span<const std::int64_t>(&b.positions[tok], 1), kv_rows[tok],
                         kv_rows[tok] + kv_bytes);
    }

    // 3 and 4. Partials of one origin at a time, reduced around the ring.
    const auto busy = t.liveness().enter(net::PeerState::busy);
    auto compute = [&](int origin) {
      const auto t0 = Clock::now();
      auto& ps = b.partial[static_cast<std::size_t>(origin)];
      const std::size_t f = first[static_cast<std::size_t>(origin)], c = count[static_cast<std::size_t>(origin)];
      ps.reset(static_cast<std::int64_t>(c), H, D);
      b.segments.clear();
      for (std::size_t i = 0; i < c; ++i) {
        const auto view = cache.view(b.sequences[f + i]);
        b.segments.push_back({view.k, view.v, view.positions.data(), static_cast<std::int64_t>(view.positions.size()),
                              static_cast<std::int64_t>(i), static_cast<std::int64_t>(i) + 1});
      }
      const auto fs = kernel.fold(b.q.data() + f * static_cast<std::size_t>(H * D), b.positions.data() + f,
                                  b.segments, ps, &t.liveness().counter());
      st.cache_rows += fs.keys_read;
      st.useful_flops += fs.useful_flops;
      st.compute_seconds += since(t0);
    };
    compute(mod(R - 1, P));
    const std::size_t state_cols = static_cast<std::size_t>(H * (D + 2));
    for (int s = 0; s + 1 < P; ++s) {
      const int send_c = mod(R - s - 1, P), recv_c = mod(R - s - 2, P);
      const std::size_t send_rows = count[static_cast<std::size_t>(send_c)], recv_rows = count[static_cast<std::size_t>(recv_c)];
      net::Request sreq, rreq;
      const auto step = static_cast<std::uint64_t>(P - 1 + s);  // after the gather's steps
      if (send_rows > 0) {
        put_state(b.state_out, b.partial[static_cast<std::size_t>(send_c)]);
        net::FrameHeader h;
        h.kind = net::FrameKind::state;
        h.job_id = dc.call;
        h.step = step;
        h.rows = static_cast<std::uint32_t>(send_rows);
        h.cols = static_cast<std::uint32_t>(state_cols);
        h.payload_bytes = b.state_out.size();
        sreq = t.isend(t.successor(), h, std::span<const std::byte>(b.state_out));
        st.bytes_sent += b.state_out.size();
      }
      if (recv_rows > 0) {
        b.state_in.resize(recv_rows * state_cols * 4);
        rreq = t.irecv(t.predecessor(), std::span<std::byte>(b.state_in));
      }
      compute(recv_c);  // overlaps both transfers
      const auto t0 = Clock::now();
      if (sreq.valid()) t.wait(sreq);
      if (rreq.valid()) {
        const net::FrameHeader got = t.wait(rreq);
        const int pred = t.predecessor();
        if (got.kind != net::FrameKind::state || got.job_id != dc.call || got.step != step || got.rows != recv_rows ||
            got.cols != state_cols)
          dc.refuse(FailureCause::protocol, pred,
                    "the partial states from predecessor rank " + std::to_string(pred) + " at reduce step " +
                        std::to_string(s) + " are not the " + std::to_string(recv_rows) + " rows of rank " +
                        std::to_string(recv_c) + "'s tokens this call expects (got a " +
                        std::string(net::to_string(got.kind)) + " of " + std::to_string(got.rows) + " rows, call " +
                        std::to_string(got.job_id) + " step " + std::to_string(got.step) + ")");
        b.incoming.reset(static_cast<std::int64_t>(recv_rows), H, D);
        get_state(b.state_in, b.incoming);
        merge(b.partial[static_cast<std::size_t>(recv_c)], b.incoming);
      }
      st.wait_seconds += since(t0);
    }
  } catch (const NetworkError& e) {
    take_back();
    im.mark_broken(e.what());
    throw;
  } catch (const std::exception& e) {
    // Refused before anything was sent (the bf16 range check): the ring stays usable.
    if (dynamic_cast<const InvalidArgument*>(&e) && st.bytes_sent == 0 && stored.empty()) throw;
    // Otherwise the peers are in the call: they cannot be left waiting.
    take_back();
    const std::string why = std::string("a decode call failed on rank ") + std::to_string(R) + ": " + e.what();
    if (t.failure().empty()) t.abort(FailureCause::local, R, why);
    im.mark_broken(why);
    throw NetworkError(why, FailureCause::local, R);
  }
  finalize(b.partial[static_cast<std::size_t>(R)], o.data(), lse.empty() ? nullptr : lse.data());
  st.seconds = since(start);
  return st;
}

}  // namespace ringattn
