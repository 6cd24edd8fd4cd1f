// Ring::decode (include/ringattn/ring.hpp): one decode step on stationary KV shards.
//
//   gather   every rank's QUERY payload (prefix, positions, sequences, then per token its
//            q, k, v in the call's dtype: decode_call.hpp) goes once around the ring, the
//            ring all-gather (all_gather.hpp);
//   store    each token's k and v are appended to the cache of decode_store_rank();
//   compute  this rank's partial (m, l, o) of every token over its own cache rows of the
//            token's sequence (kernels/cache_attention.hpp), one origin's tokens at a time,
//            in the order the reduce-scatter needs them;
//   reduce   the ring reduce-scatter of the partials (reduce_scatter.hpp): after P-1
//            steps this rank's own tokens' states are complete.
// The next origin's partial is computed while the previous one travels. Everything a peer
// sends is checked before it is used (frame, prefix and spec, origin, sizes, positions and
// sequences >= 0); a token whose position does not continue its sequence on the rank that
// stores it fails the call on every rank.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "kernels/dispatch.hpp"
#include "ringattn/error.hpp"
#include "ringattn/kv_cache.hpp"
#include "ringattn/ring.hpp"
#include "ring/call_checks.hpp"
#include "ring/decode_call.hpp"
#include "ring/internals.hpp"
#include "ring/ring_impl.hpp"
#include "ring/schedules.hpp"

namespace ringattn {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using Bad = std::function<void(const std::string&)>;

// Everything a call must satisfy, checked before anything is sent: a bad call leaves the
// ring usable. Returns the call's cache kernel (which validates the shape and mask).
kernels::CacheAttention& check_call(Ring::Impl& im, const AttentionSpec& spec, const KVCache& cache,
                                    std::span<const std::int32_t> sequences, std::span<const std::int64_t> positions,
                                    std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                    std::span<float> o, std::span<float> lse, const Bad& bad) {
  const auto n = static_cast<std::int64_t>(positions.size());
  im.check_limits(spec, n, "tokens", bad);
  kernels::CacheAttention& kernel = im.cache_kernel_for(spec);
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
  for (std::size_t i = 0; i < positions.size(); ++i)
    if (sequences[i] < 0 || positions[i] < 0)
      bad("token " + std::to_string(i) + ": sequence " + std::to_string(sequences[i]) + " and position " +
          std::to_string(positions[i]) + " must be >= 0");
  const auto& ops = kernels::ops_for(kernel.isa());
  if (ops.has_non_finite_f32(q.data(), static_cast<std::int64_t>(q.size())) ||
      ops.has_non_finite_f32(k.data(), static_cast<std::int64_t>(k.size())) ||
      ops.has_non_finite_f32(v.data(), static_cast<std::int64_t>(v.size())))
    bad("q, k or v holds NaN or inf (refused before anything was sent)");
  return kernel;
}

// The gathered tokens of every origin, in origin order: positions, sequences, fp32 q, and
// where each token's k and v are in its payload. first[r]: the index of origin r's first.
void unpack(const ring::DecodeCall& dc, ring::DecodeState& b, const std::vector<std::size_t>& count,
            std::vector<std::size_t>& first, std::vector<const std::byte*>& kv_rows) {
  const int P = dc.world();
  const std::size_t qn = static_cast<std::size_t>(dc.H * dc.D);
  first.assign(static_cast<std::size_t>(P) + 1, 0);
  for (int r = 0; r < P; ++r) first[static_cast<std::size_t>(r) + 1] = first[static_cast<std::size_t>(r)] + count[static_cast<std::size_t>(r)];
  const std::size_t T = first.back();
  b.positions.resize(T);
  b.sequences.resize(T);
  b.q.resize(T * qn);
  kv_rows.resize(T);
  for (int r = 0; r < P; ++r) {
    const auto& buf = b.gathered[static_cast<std::size_t>(r)];
    const ring::BlockLayout L = dc.layout(count[static_cast<std::size_t>(r)]);
    for (std::size_t i = 0; i < L.rows; ++i) {
      const std::size_t tok = first[static_cast<std::size_t>(r)] + i;
      b.positions[tok] = L.tag(buf.data(), i);
      b.sequences[tok] = L.group(buf.data(), i);
      const std::byte* row = buf.data() + L.body(0) + i * dc.cols * dc.esz;
      float* qd = b.q.data() + tok * qn;
      if (dc.cs.dtype == DType::bf16) dc.ops.from_bf16(reinterpret_cast<const std::uint16_t*>(row), qd, static_cast<std::int64_t>(qn));
      else std::memcpy(qd, row, qn * 4);
      kv_rows[tok] = row + qn * dc.esz;
    }
  }
}

// This rank's share of the new tokens, in (sequence, position) order, appended to its
// cache; `stored` records each sequence's rows before, to take them back if the call fails.
void store(ring::DecodeCall& dc, const ring::DecodeState& b, const std::vector<std::size_t>& first,
           const std::vector<const std::byte*>& kv_rows, KVCache& cache,
           std::vector<std::pair<std::int32_t, std::int64_t>>& stored) {
  const int R = dc.rank(), P = dc.world();
  std::map<std::int32_t, std::int64_t> last;
  std::vector<std::size_t> mine;
  for (std::size_t tok = 0; tok < b.positions.size(); ++tok)
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
                "the token of sequence " + std::to_string(seq) + " at position " + std::to_string(b.positions[tok]) +
                    " (from rank " +
                    std::to_string(dc.t.ring_rank(static_cast<int>(std::upper_bound(first.begin(), first.end(), tok) - first.begin() - 1))) +
                    ") does not follow the sequence's last position " + std::to_string(it->second) +
                    " on this rank, which stores it: decode positions must continue each sequence");
    it->second = b.positions[tok];
  }
  for (const auto& [seq, unused] : last) stored.emplace_back(seq, cache.rows(seq));
  const std::size_t kv_bytes = static_cast<std::size_t>(dc.KH * dc.D) * dc.esz;
  for (std::size_t tok : mine)
    cache.append_raw(b.sequences[tok], std::span<const std::int64_t>(&b.positions[tok], 1), kv_rows[tok],
                     kv_rows[tok] + kv_bytes);
}

// Origin's partial on this rank: its tokens against this rank's cache rows of their sequences.
void compute_partial(const ring::DecodeCall& dc, ring::DecodeState& b, kernels::CacheAttention& kernel,
                     const KVCache& cache, std::size_t f, std::size_t c, OnlineSoftmaxState& ps, DecodeStats& st) {
  const auto t0 = Clock::now();
  ps.reset(static_cast<std::int64_t>(c), dc.H, dc.D);
  b.segments.clear();
  for (std::size_t i = 0; i < c; ++i) {
    const auto view = cache.view(b.sequences[f + i]);
    b.segments.push_back({view.k, view.v, view.positions.data(), static_cast<std::int64_t>(view.positions.size()),
                          static_cast<std::int64_t>(i), static_cast<std::int64_t>(i) + 1});
  }
  const auto fs = kernel.fold(b.q.data() + f * static_cast<std::size_t>(dc.H * dc.D), b.positions.data() + f,
                              b.segments, ps, &dc.t.liveness().counter());
  st.cache_rows += fs.keys_read;
  st.useful_flops += fs.useful_flops;
  st.compute_seconds += since(t0);
}

// Inside a catch: the call failed. A refusal before anything was sent leaves the ring
// usable; anything later breaks it, and the peers, in the call, are told.
[[noreturn]] void fail_call(Ring::Impl& im, net::Transport& t, int R, bool nothing_sent) {
  try {
    throw;
  } catch (const NetworkError& e) {
    im.mark_broken(e.what());
    throw;
  } catch (const std::exception& e) {
    if (nothing_sent && dynamic_cast<const InvalidArgument*>(&e)) throw;  // the bf16 range check
    const std::string why = std::string("a decode call failed on rank ") + std::to_string(t.ring_rank(R)) + ": " + e.what();
    if (t.failure().empty()) t.abort(FailureCause::local, R, why);
    im.mark_broken(why);
    throw NetworkError(why, FailureCause::local, R);
  }
}

}  // namespace

namespace {

DecodeStats decode_body(Ring& self, Ring::Impl& im, const AttentionCall& call, KVCache& cache, std::span<float> o,
                        std::span<float> lse) {
  const Scope scope = call.scope;
  const AttentionSpec& spec = call.spec;
  const std::span<const std::int32_t> sequences = call.documents;  // each token's sequence
  const std::span<const std::int64_t> positions = call.positions;
  const std::span<const float> q = call.q, k = call.k, v = call.v;
  const auto start = Clock::now();
  im.check_usable();
  ring::check_scope(im, scope, "decode");
  net::Transport& t = scope == Scope::ring ? *im.transport : im.mesh_of().of(scope);
  const int R = t.rank(), P = t.world();  // in the scope (a message names the ring's rank: ring_rank)
  const Bad bad = [&](const std::string& what) {
    throw InvalidArgument("rank " + std::to_string(self.rank()) + ": decode: " + what);
  };
  kernels::CacheAttention& kernel = check_call(im, spec, cache, sequences, positions, q, k, v, o, lse, bad);
  const std::int64_t H = spec.heads, KH = spec.kv_heads, D = spec.head_dim;
  ring::DecodeCall dc{t, kernels::ops_for(kernel.isa()), ring::call_spec(spec, kernel.config().scale), ++im.calls,
                      H, KH, D, static_cast<std::size_t>((H + 2 * KH) * D), dtype_size(spec.dtype),
                      static_cast<std::uint32_t>(im.options.limits.max_rows)};
  auto& slot = im.decode[static_cast<std::size_t>(scope)];
  if (!slot) slot = std::make_unique<ring::DecodeState>(t, RingInternals::max_frame_bytes(self));
  auto& b = *slot;
  b.gathered.resize(static_cast<std::size_t>(P));
  std::vector<std::size_t> count(static_cast<std::size_t>(P), 0);  // tokens per origin
  DecodeStats st;
  std::vector<std::pair<std::int32_t, std::int64_t>> stored;  // sequences appended to, and their rows before
  try {
    auto& own = b.gathered[static_cast<std::size_t>(R)];
    dc.encode(own, sequences, positions, q, k, v);
    if (spec.dtype == DType::bf16 &&  // a finite fp32 beyond bf16's range rounds to inf
        dc.ops.has_non_finite_bf16(reinterpret_cast<const std::uint16_t*>(own.data() + dc.layout(positions.size()).body(0)),
                                   static_cast<std::int64_t>(positions.size() * dc.cols)))
      bad("q, k or v holds a value beyond bf16's range (about 3.39e38), which bf16 rounds to inf");
    count[static_cast<std::size_t>(R)] = positions.size();
    const collectives::ExchangeStats g = b.gather.run_sized(b.gathered, [&](int s, int origin) {
      count[static_cast<std::size_t>(origin)] = dc.check_query(b.gathered[static_cast<std::size_t>(origin)], s, origin);
    });
    st.bytes_sent += g.bytes_sent;
    st.wait_seconds += g.wait_seconds;
    std::vector<std::size_t> first;
    std::vector<const std::byte*> kv_rows;  // each token's k, then v, in the payload (dtype)
    unpack(dc, b, count, first, kv_rows);
    st.tokens = static_cast<std::int64_t>(first.back());
    store(dc, b, first, kv_rows, cache, stored);
    const auto busy = t.liveness().enter(net::PeerState::busy);
    // The partials: each origin's tokens against this rank's cache, computed while the last
    // one travels, merged as online-softmax states on the way to their origin.
    const std::size_t row = ring::state_row_floats(H, D);
    b.counts.resize(static_cast<std::size_t>(P));
    std::vector<std::size_t> offset(static_cast<std::size_t>(P) + 1, 0);
    for (std::size_t c = 0; c < b.counts.size(); ++c) {
      b.counts[c] = count[c] * row;
      offset[c + 1] = offset[c] + b.counts[c];
    }
    b.partials.resize(offset.back());
    auto as_state = [&](std::span<const float> rows, OnlineSoftmaxState& s) {
      s.reset(static_cast<std::int64_t>(rows.size() / row), H, D);
      ring::get_state(rows, s);
    };
    const collectives::ExchangeStats r = b.reduce.run(
        b.partials, b.counts,
        [&](std::span<float> into, std::span<const float> from) {
          as_state(into, b.mine);
          as_state(from, b.theirs);
          merge(b.mine, b.theirs);
          ring::put_state(into, b.mine);
        },
        [&](int origin) {
          const auto o_ = static_cast<std::size_t>(origin);
          compute_partial(dc, b, kernel, cache, first[o_], count[o_], b.mine, st);
          ring::put_state(std::span<float>(b.partials).subspan(offset[o_], b.counts[o_]), b.mine);
        });
    st.bytes_sent += r.bytes_sent;
    st.wait_seconds += r.wait_seconds;
  } catch (...) {
    for (const auto& [seq, rows] : stored) cache.truncate(seq, rows);
    fail_call(im, t, R, st.bytes_sent == 0 && stored.empty());
  }
  const auto own = static_cast<std::size_t>(R);
  std::size_t at = 0;
  for (std::size_t c = 0; c < own; ++c) at += b.counts[c];
  b.mine.reset(static_cast<std::int64_t>(count[own]), H, D);
  ring::get_state(std::span<const float>(b.partials).subspan(at, b.counts[own]), b.mine);
  finalize(b.mine, o.data(), lse.empty() ? nullptr : lse.data());
  st.seconds = since(start);
  return st;
}

}  // namespace

namespace ring {

DecodeStats decode_ring(Ring& self, Ring::Impl& im, const AttentionCall& c, KVCache& cache, std::span<float> o,
                        std::span<float> lse) {
  return decode_body(self, im, c, cache, o, lse);
}

}  // namespace ring
}  // namespace ringattn
