// Decode on stationary KV shards through the public Ring: a packed prefill (forward with
// documents, the rows kept in a KVCache per rank), then K decode steps of one token per
// document; every decode output must be float64 dense attention of that token over its
// document up to itself. Tolerances as the other ring tests.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "ringattn/error.hpp"
#include "ringattn/kv_cache.hpp"
#include "ringattn/packing.hpp"
#include "ringattn/ring.hpp"
#include "src/oracle/random_inputs.hpp"
#include "src/oracle/reference.hpp"
#include "tests/free_port.hpp"
#include "tests/ring/ranks_as_threads.hpp"

using namespace ringattn;
using test::on_ranks;
using test::options;

namespace {

std::string fresh_master() { return "127.0.0.1:" + std::to_string(test::free_port()); }

std::vector<float> rows(const std::vector<float>& t, const std::vector<std::int64_t>& pos, std::int64_t width) {
  std::vector<float> out;
  for (auto p : pos) out.insert(out.end(), t.begin() + p * width, t.begin() + (p + 1) * width);
  return out;
}

// Documents of prompt lengths `prompt` that each grow by `steps` decode tokens. The
// packed tensors hold every token (prompt, then its decode tokens) at position
// cu_full[d] + i; the reference is causal attention within each document over them.
struct Generation {
  std::vector<std::int64_t> prompt, cu_pre = {0}, cu_full = {0};
  int steps;
  std::int64_t H = 4, KH = 2, D = 64;
  AttentionSpec spec;
  std::vector<float> q, k, v;
  std::vector<double> ref_o, ref_lse;

  Generation(std::vector<std::int64_t> lengths, int k_steps, Mask mask, DType dt, unsigned seed)
      : prompt(std::move(lengths)), steps(k_steps) {
    for (auto n : prompt) {
      cu_pre.push_back(cu_pre.back() + n);
      cu_full.push_back(cu_full.back() + n + steps);
    }
    const std::int64_t N = cu_full.back();
    spec = {H, KH, D, dt, mask, 0};
    q = oracle::random_normal(static_cast<std::size_t>(N * H * D), seed);
    k = oracle::random_normal(static_cast<std::size_t>(N * KH * D), seed + 1);
    v = oracle::random_normal(static_cast<std::size_t>(N * KH * D), seed + 2);
    if (dt == DType::bf16) {
      oracle::round_to_bf16(q);
      oracle::round_to_bf16(k);
      oracle::round_to_bf16(v);
    }
    ref_o.resize(q.size());
    ref_lse.resize(static_cast<std::size_t>(N * H));
    const auto ids = document_ids(cu_full);
    const auto all = Positions::contiguous(0, N);
    // Every token sees its document's earlier tokens: a decode token sees nothing later,
    // whatever the mask (nothing later is cached yet), so `none` is causal here too.
    const Mask ref_mask = mask.kind == MaskKind::none ? Mask::causal() : mask;
    oracle::dense_attention_f64({H, KH, D, ref_mask, 0.0}, q.data(), all, k.data(), v.data(), all, ref_o.data(),
                                ref_lse.data(), ids.data(), ids.data());
  }

  int documents() const { return static_cast<int>(prompt.size()); }
  std::int64_t decode_position(int d, int step) const { return cu_full[static_cast<std::size_t>(d)] + prompt[static_cast<std::size_t>(d)] + step; }

  struct Result {
    double err_o = 0, err_lse = 0;
    std::vector<DecodeStats> stats;
    std::int64_t stored = 0;  // decode tokens this rank's cache took
  };

  // o [pos, h_count, D] and lse of query heads [h_first, h_first + h_count).
  void compare(Result& r, const std::vector<std::int64_t>& pos, const std::vector<float>& o, const std::vector<float>& lse,
               std::int64_t h_first = 0, std::int64_t h_count = -1) const {
    if (h_count < 0) h_count = H;
    for (std::size_t i = 0; i < pos.size(); ++i)
      for (std::int64_t h = 0; h < h_count; ++h) {
        const std::size_t g = static_cast<std::size_t>(pos[i] * H + h_first + h),
                          l = i * static_cast<std::size_t>(h_count) + static_cast<std::size_t>(h);
        if (!(std::isinf(ref_lse[g]) && std::isinf(lse[l]))) r.err_lse = std::max(r.err_lse, std::fabs(lse[l] - ref_lse[g]));
        for (std::int64_t e = 0; e < D; ++e)
          r.err_o = std::max(r.err_o, std::fabs(o[l * static_cast<std::size_t>(D) + static_cast<std::size_t>(e)] -
                                                ref_o[g * static_cast<std::size_t>(D) + static_cast<std::size_t>(e)]));
      }
  }

  // One rank's whole run: prefill its balanced shard, then `steps` decode steps with the
  // tokens of the documents it owns (document d: rank d mod P). In a scope of a mesh
  // (tensor parallelism): P and R are the scope's, and the rank holds its part of `parts`
  // of the heads (query and K/V heads alike).
  Result run(Ring& ring, Scope scope = Scope::ring, int part = 0, int parts = 1) const {
    const int P = ring.scope_size(scope), R = ring.scope_rank(scope);
    const std::int64_t h = H / parts, kh = KH / parts, h0 = part * h, kh0 = part * kh;
    AttentionSpec local = spec;
    local.heads = h;
    local.kv_heads = kh;
    // The rows of t [*, all heads, D] at `at`, heads [first, first + count).
    auto rows = [&](const std::vector<float>& t, const std::vector<std::int64_t>& at, std::int64_t all, std::int64_t first,
                    std::int64_t count) {
      std::vector<float> out;
      for (auto p : at) out.insert(out.end(), t.begin() + (p * all + first) * D, t.begin() + (p * all + first + count) * D);
      return out;
    };
    auto shard = shard_documents(cu_pre, P)[static_cast<std::size_t>(R)];
    for (std::size_t i = 0; i < shard.positions.size(); ++i) {  // prompt space -> the packed tensors' rows
      const auto d = static_cast<std::size_t>(shard.documents[i]);
      shard.positions[i] += cu_full[d] - cu_pre[d];
    }
    const auto& pos = shard.positions;
    const auto kr = rows(k, pos, KH, kh0, kh), vr = rows(v, pos, KH, kh0, kh);
    std::vector<float> o(pos.size() * static_cast<std::size_t>(h * D)), lse(pos.size() * static_cast<std::size_t>(h));
    Result r;
    ring.forward({local, rows(q, pos, H, h0, h), kr, vr, pos, shard.documents, Schedule::ring, scope}, o, lse);
    // (Without a mask a prompt token sees its whole prompt, later tokens included: not the
    // causal reference; the decode tokens are what this test is about.)
    if (spec.mask.kind != MaskKind::none) compare(r, pos, o, lse, h0, h);
    KVCache cache(kh, D, spec.dtype);
    cache.append_packed(pos, shard.documents, kr, vr);
    const std::int64_t prefilled = cache.rows();
    for (int s = 0; s < steps; ++s) {
      std::vector<std::int32_t> seqs;
      std::vector<std::int64_t> dpos;
      for (int d = R; d < documents(); d += P) {
        seqs.push_back(d);
        dpos.push_back(decode_position(d, s));
      }
      std::vector<float> od(dpos.size() * static_cast<std::size_t>(h * D)), ld(dpos.size() * static_cast<std::size_t>(h));
      r.stats.push_back(ring.decode({local, rows(q, dpos, H, h0, h), rows(k, dpos, KH, kh0, kh), rows(v, dpos, KH, kh0, kh), dpos, seqs, Schedule::ring, scope}, cache, od, ld));
      compare(r, dpos, od, ld, h0, h);
    }
    r.stored = cache.rows() - prefilled;
    return r;
  }
};

std::vector<Generation::Result> run_all(const Generation& g, int world) {
  std::vector<Generation::Result> res(static_cast<std::size_t>(world));
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, m));
    res[static_cast<std::size_t>(r)] = g.run(ring);
  });
  for (int r = 0; r < world; ++r) CHECK(errors[static_cast<std::size_t>(r)] == "");
  return res;
}

}  // namespace

TEST_CASE("ring decode: exact per-document attention at every step for P = 1..4, every mask and dtype") {
  // Long prompts spread over the ranks, tiny ones (1, 2 tokens), more documents than ranks
  // for P < 4 and fewer owners than ranks for one step at P = 4 (5 documents: rank 0 owns two).
  const std::vector<std::int64_t> prompt = {60, 1, 2, 130, 17};
  for (int world : {1, 2, 3, 4})
    for (Mask mask : {Mask::none(), Mask::causal(), Mask::sliding_window(9)})
      for (DType dt : {DType::f32, DType::bf16}) {
        const Generation g(prompt, 5, mask, dt, 21);
        INFO("P=" << world << " " << to_string(mask) << " " << to_string(dt));
        const auto res = run_all(g, world);
        std::int64_t stored = 0;
        for (int r = 0; r < world; ++r) {
          const auto& x = res[static_cast<std::size_t>(r)];
          CHECK(x.err_o <= (dt == DType::bf16 ? 1e-2 : 2e-5));
          CHECK(x.err_lse <= 2e-5);
          stored += x.stored;
          // The steps' decode tokens are spread over the ranks: 25 of them, so 25/P ± 1
          // each (store rank (sequence + position) mod P).
          CHECK(std::abs(x.stored * world - 25) <= world * 2);
          for (const auto& s : x.stats) CHECK(s.tokens == 5);
        }
        CHECK(stored == 25);
      }
}

TEST_CASE("ring decode: decode_in across a mesh's groups, each rank its heads (tensor parallelism)") {
  // P = 4 in groups of 2: the two groups are the ring across which prefill and decode run;
  // rank i of a group holds query heads 2i, 2i+1 and K/V head i of the group's tokens.
  const std::vector<std::int64_t> prompt = {60, 1, 2, 130, 17};
  for (DType dt : {DType::f32, DType::bf16}) {
    const Generation g(prompt, 5, Mask::causal(), dt, 23);
    INFO(to_string(dt));
    std::vector<Generation::Result> res(4);
    const std::string m = fresh_master();
    const auto errors = on_ranks(4, [&](int r) {
      RingOptions ro = options(r, 4, m);
      ro.group_size = 2;
      Ring ring = Ring::connect(ro);
      res[static_cast<std::size_t>(r)] = g.run(ring, Scope::across, r % 2, 2);
    });
    for (const auto& e : errors) CHECK(e == "");
    std::int64_t stored = 0;
    for (int r = 0; r < 4; ++r) {
      const auto& x = res[static_cast<std::size_t>(r)];
      CHECK(x.err_o <= (dt == DType::bf16 ? 1e-2 : 2e-5));
      CHECK(x.err_lse <= 2e-5);
      for (const auto& s : x.stats) CHECK(s.tokens == 5);  // the scope's tokens: one group's
      stored += x.stored;
    }
    CHECK(stored == 2 * 25);  // each token's rows once per head part, on one rank across
  }
}

TEST_CASE("ring decode: one sequence at P = 3 (two ranks without tokens), bytes per token independent of the context") {
  for (std::int64_t len : {40, 400}) {
    const Generation g({len}, 3, Mask::causal(), DType::bf16, 31);
    const auto res = run_all(g, 3);
    for (int r = 0; r < 3; ++r) {
      const auto& x = res[static_cast<std::size_t>(r)];
      CHECK(x.err_o <= 1e-2);
      CHECK(x.err_lse <= 2e-5);
      // Gather: rank r relays the owner's QUERY (prefix, tags, groups, q, k, v in bf16) unless
      // it is the owner's predecessor, and sends its own empty ones; reduce: one STATE of the
      // token (fp32 o, m, l) unless it is the owner. Nothing depends on the cache.
      const std::uint64_t query = 32 + 12 + (4 + 2 * 2) * 64 * 2, empty = 32, state = 4 * (64 + 2) * 4;
      const std::uint64_t gather = r == 0 ? query + empty : r == 1 ? query + empty : 2 * empty;  // owner 0 sends its own
      const std::uint64_t reduce = r == 0 ? 0 : state;
      for (const auto& s : x.stats) CHECK(s.bytes_sent == gather + reduce);
    }
  }
}

TEST_CASE("ring decode: a token that does not continue its sequence fails on every rank; bad calls leave the ring usable") {
  const int world = 2;
  const Generation g({30, 20}, 1, Mask::causal(), DType::f32, 41);
  std::vector<std::string> refused(world);
  std::vector<int> broken(world, 1), rows_back(world, 0);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, m, 5));
    auto shard = shard_documents(g.cu_pre, world)[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < shard.positions.size(); ++i) {
      const auto d = static_cast<std::size_t>(shard.documents[i]);
      shard.positions[i] += g.cu_full[d] - g.cu_pre[d];
    }
    const auto& pos = shard.positions;
    KVCache cache(g.KH, g.D, DType::f32);
    cache.append_packed(pos, shard.documents, rows(g.k, pos, g.KH * g.D), rows(g.v, pos, g.KH * g.D));
    std::vector<std::int32_t> seq = {r};
    std::vector<std::int64_t> dp = {g.decode_position(r, 0)};
    std::vector<float> o(static_cast<std::size_t>(g.H * g.D));
    // A bad call first: a cache of another dtype is refused up front.
    KVCache wrong(g.KH, g.D, DType::bf16);
    try {
      ring.decode({g.spec, rows(g.q, dp, g.H * g.D), rows(g.k, dp, g.KH * g.D), rows(g.v, dp, g.KH * g.D), dp, seq}, wrong, o);
    } catch (const InvalidArgument& e) {
      refused[static_cast<std::size_t>(r)] = e.what();
    }
    // A value beyond bf16's range in a bf16 call is refused before sending, too.
    {
      AttentionSpec spec16 = g.spec;
      spec16.dtype = DType::bf16;
      auto q = rows(g.q, dp, g.H * g.D);
      q[5] = 3.4e38f;  // finite in fp32 (max 3.40282e38), inf in bf16 (max 3.38953e38)
      try {
        ring.decode({spec16, q, rows(g.k, dp, g.KH * g.D), rows(g.v, dp, g.KH * g.D), dp, seq}, wrong, o);
      } catch (const InvalidArgument& e) {
        refused[static_cast<std::size_t>(r)] += std::string(" | ") + e.what();
      }
      CHECK_FALSE(ring.broken());
    }
    // Then this rank's token of the step, and a position inside the prompt: whichever rank
    // stores the stale one fails the call everywhere, and every cache is as it was before.
    const std::int64_t before = cache.rows();
    std::vector<std::int32_t> two = {r, r};
    std::vector<std::int64_t> stale = {dp[0], g.cu_full[static_cast<std::size_t>(r)]};
    std::vector<float> o2(2 * static_cast<std::size_t>(g.H * g.D));
    try {
      ring.decode({g.spec, rows(g.q, stale, g.H * g.D), rows(g.k, stale, g.KH * g.D), rows(g.v, stale, g.KH * g.D), stale, two}, cache, o2);
    } catch (...) {
      broken[static_cast<std::size_t>(r)] = ring.broken();
      rows_back[static_cast<std::size_t>(r)] = cache.rows() == before;
      throw;
    }
    broken[static_cast<std::size_t>(r)] = 0;
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)] << " / " << refused[static_cast<std::size_t>(r)]);
    CHECK(refused[static_cast<std::size_t>(r)].find("the cache holds") != std::string::npos);
    CHECK(refused[static_cast<std::size_t>(r)].find("beyond bf16's range") != std::string::npos);
    CHECK(rows_back[static_cast<std::size_t>(r)]);
    CHECK(errors[static_cast<std::size_t>(r)].find("does not follow the sequence's last position") != std::string::npos);
    CHECK(broken[static_cast<std::size_t>(r)]);
  }
}

TEST_CASE("ring decode: a rank calling forward while the others decode fails the call on every rank") {
  const int world = 2;
  const Generation g({30, 20}, 1, Mask::causal(), DType::f32, 43);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, m, 5));
    KVCache cache(g.KH, g.D, DType::f32);
    std::vector<std::int64_t> dp = {g.decode_position(r, 0)};
    std::vector<float> o(static_cast<std::size_t>(g.H * g.D));
    const auto q = rows(g.q, dp, g.H * g.D), k = rows(g.k, dp, g.KH * g.D), v = rows(g.v, dp, g.KH * g.D);
    if (r == 1) ring.forward({g.spec, q, k, v, dp}, o);
    else ring.decode({g.spec, q, k, v, dp, std::vector<std::int32_t>{0}}, cache, o);
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
    CHECK(errors[static_cast<std::size_t>(r)] != "");
  }
}

TEST_CASE("ring decode: tokens of one sequence may come in any order within a step") {
  // Both decode tokens of the one document in one call, the later first: each is stored
  // on its rank in position order, and each query still sees exactly its own past.
  const int world = 2;
  const Generation g({50}, 2, Mask::causal(), DType::f32, 47);
  std::vector<double> err(world, 0);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, m));
    auto shard = shard_documents(g.cu_pre, world)[static_cast<std::size_t>(r)];
    const auto& pos = shard.positions;  // one document: prompt space is the file's rows
    KVCache cache(g.KH, g.D, DType::f32);
    std::vector<float> o(pos.size() * static_cast<std::size_t>(g.H * g.D));
    ring.forward({g.spec, rows(g.q, pos, g.H * g.D), rows(g.k, pos, g.KH * g.D), rows(g.v, pos, g.KH * g.D), pos, shard.documents}, o);
    cache.append_packed(pos, shard.documents, rows(g.k, pos, g.KH * g.D), rows(g.v, pos, g.KH * g.D));
    std::vector<std::int32_t> seqs = r == 0 ? std::vector<std::int32_t>{0, 0} : std::vector<std::int32_t>{};
    std::vector<std::int64_t> dp = r == 0 ? std::vector<std::int64_t>{51, 50} : std::vector<std::int64_t>{};
    std::vector<float> od(dp.size() * static_cast<std::size_t>(g.H * g.D)), ld(dp.size() * static_cast<std::size_t>(g.H));
    ring.decode({g.spec, rows(g.q, dp, g.H * g.D), rows(g.k, dp, g.KH * g.D), rows(g.v, dp, g.KH * g.D), dp, seqs}, cache, od, ld);
    Generation::Result res;
    g.compare(res, dp, od, ld);
    err[static_cast<std::size_t>(r)] = std::max(res.err_o, res.err_lse);
  });
  for (int r = 0; r < world; ++r) {
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(err[static_cast<std::size_t>(r)] <= 2e-5);
  }
}

TEST_CASE("KV cache: appends are checked, all or nothing") {
  KVCache c(2, 32, DType::bf16);
  std::vector<float> kv(3 * 2 * 32, 0.25f);
  c.append_packed(std::vector<std::int64_t>{0, 1, 5}, std::vector<std::int32_t>{0, 0, 1}, kv, kv);
  CHECK(c.rows() == 3);
  CHECK(c.rows(0) == 2);
  CHECK(c.bytes() == 3u * 2 * 32 * 2 * 2);
  CHECK(c.sequences() == std::vector<std::int32_t>{0, 1});
  std::vector<float> one(2 * 32, 1.0f);
  CHECK_THROWS_AS(c.append(0, std::vector<std::int64_t>{1}, one, one), InvalidArgument);  // does not follow
  one[3] = NAN;
  CHECK_THROWS_AS(c.append(2, std::vector<std::int64_t>{0}, one, one), InvalidArgument);  // not finite
  CHECK_THROWS_AS(c.append_packed(std::vector<std::int64_t>{7, 8, 9}, std::vector<std::int32_t>{1, 2, 1}, kv, kv),
                  InvalidArgument);  // document 1 twice, not contiguous
  CHECK(c.rows() == 3);
  c.truncate(1, 5);  // holds fewer: nothing to take back
  CHECK(c.rows() == 3);
  c.truncate(0, 1);
  CHECK(c.rows() == 2);
  CHECK(c.view(0).positions.size() == 1);
  c.append(0, std::vector<std::int64_t>{1}, std::vector<float>(2 * 32, 1.0f), std::vector<float>(2 * 32, 1.0f));
  CHECK(c.rows(0) == 2);  // position 1 follows again once taken back
  c.erase(0);
  CHECK(c.rows() == 1);
  CHECK(decode_store_rank(3, 10, 4) == 1);
  // shrink: a sequence keeps its rows and gives back what was reserved; one reserved here
  // that holds no row is forgotten.
  c.reserve(1, 4096);
  c.reserve(9, 4096);
  c.shrink(1);
  c.shrink(9);
  c.shrink(42);  // unknown: nothing
  CHECK(c.sequences() == std::vector<std::int32_t>{1});
  CHECK(c.rows(1) == 1);
  CHECK(c.view(1).positions[0] == 5);
  c.append(1, std::vector<std::int64_t>{6}, std::vector<float>(2 * 32, 1.0f), std::vector<float>(2 * 32, 1.0f));
  CHECK(c.rows(1) == 2);
}

// Issue 45: kv_heads and head_dim bounded, and every rows x row product checked, before
// anything is sized or copied.
TEST_CASE("KV cache: head counts and row counts whose products overflow are refused") {
  // 2^32 x 2^30 elements a row: 4 rows wrapped to 0 elements and empty arrays were taken.
  CHECK_THROWS_WITH_AS(KVCache(std::int64_t{1} << 32, std::int64_t{1} << 30),
                       doctest::Contains("must be in 1..65536"), InvalidArgument);
  CHECK_THROWS_AS(KVCache(1, std::int64_t{1} << 17), InvalidArgument);
  CHECK_THROWS_AS(KVCache(std::int64_t{1} << 17, 1), InvalidArgument);
  KVCache c(1 << 16, 1 << 16);  // the largest row: 2^32 floats, 16 GiB (nothing allocated yet)
  std::vector<float> none;
  const std::vector<std::int64_t> four = {0, 1, 2, 3};
  CHECK_THROWS_WITH_AS(c.append(0, four, none, none), doctest::Contains("expected 17179869184"), InvalidArgument);
  // 2^30 rows of 2^34 bytes: 2^64 bytes, wrapped to 0.
  CHECK_THROWS_WITH_AS(c.reserve(0, std::int64_t{1} << 30), doctest::Contains("overflow"), InvalidArgument);
  const std::span<const std::int64_t> many(four.data(), std::size_t{1} << 30);  // never read: refused first
  CHECK_THROWS_WITH_AS(c.append(0, many, none, none), doctest::Contains("append: 1073741824 rows"), InvalidArgument);
  CHECK_THROWS_WITH_AS(c.append_raw(0, many, none.data(), none.data()),
                       doctest::Contains("overflow"), InvalidArgument);
  CHECK(c.rows() == 0);
  CHECK(c.sequences().empty());
}
