// Document masks (packed variable-length batches) in the block-attention kernel, on
// every ISA path, against float64 dense attention within each document.
// Tolerances as test_block_attention.cpp: fp32 2e-5 on O and lse; bf16 1e-2 on O.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "attention_fixture.hpp"
#include "ringattn/error.hpp"
#include "ringattn/packing.hpp"

using namespace ringattn;

namespace {

constexpr double kTolF32 = 2e-5;
constexpr double kTolBf16 = 1e-2;
constexpr double kTolLse = 2e-5;

std::vector<std::int64_t> cumulative(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> cu = {0};
  for (auto n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

// A packed batch: queries at `qpos`, keys at `kpos` (both increasing subsets of the
// packed sequence), folded in `pieces` key pieces, compared with the float64 oracle.
struct PackedProblem {
  std::vector<std::int64_t> cu, qpos, kpos;
  std::int64_t heads = 4, kv_heads = 2, head_dim = 64;
  Mask mask;
  DType dtype = DType::f32;

  fixture::Errors run(Isa isa, int pieces, unsigned seed, FoldStats* total = nullptr) const {
    const auto ids = document_ids(cu);
    std::vector<std::int32_t> qd, kd;
    for (auto p : qpos) qd.push_back(ids[static_cast<std::size_t>(p)]);
    for (auto p : kpos) kd.push_back(ids[static_cast<std::size_t>(p)]);
    const auto nq = static_cast<std::int64_t>(qpos.size()), nk = static_cast<std::int64_t>(kpos.size());
    auto q = oracle::random_normal(static_cast<std::size_t>(nq * heads * head_dim), seed);
    auto k = oracle::random_normal(static_cast<std::size_t>(nk * kv_heads * head_dim), seed + 1);
    auto v = oracle::random_normal(static_cast<std::size_t>(nk * kv_heads * head_dim), seed + 2);
    std::vector<std::uint16_t> qh, kh, vh;
    if (dtype == DType::bf16) {
      qh = oracle::round_to_bf16(q);
      kh = oracle::round_to_bf16(k);
      vh = oracle::round_to_bf16(v);
    }
    AttentionConfig c;
    c.heads = heads;
    c.kv_heads = kv_heads;
    c.head_dim = head_dim;
    c.dtype = dtype;
    c.mask = mask;
    c.isa = isa;
    BlockAttention attn(c);
    OnlineSoftmaxState st(nq, heads, head_dim);
    const Positions qp = Positions::from_sorted(qpos.data(), nq);
    const std::size_t width = static_cast<std::size_t>(kv_heads * head_dim), esz = dtype_size(dtype);
    const char* kb = dtype == DType::bf16 ? reinterpret_cast<const char*>(kh.data()) : reinterpret_cast<const char*>(k.data());
    const char* vb = dtype == DType::bf16 ? reinterpret_cast<const char*>(vh.data()) : reinterpret_cast<const char*>(v.data());
    const void* qb = dtype == DType::bf16 ? static_cast<const void*>(qh.data()) : static_cast<const void*>(q.data());
    for (int i = 0; i < pieces; ++i) {
      const std::int64_t r0 = nk * i / pieces, r1 = nk * (i + 1) / pieces;
      const Positions kp = Positions::from_sorted(kpos.data() + r0, r1 - r0);
      const auto s = attn.fold(qb, qp, qd, kb + static_cast<std::size_t>(r0) * width * esz,
                               vb + static_cast<std::size_t>(r0) * width * esz, kp,
                               std::span<const std::int32_t>(kd).subspan(static_cast<std::size_t>(r0),
                                                                         static_cast<std::size_t>(r1 - r0)),
                               st);
      if (total) {
        total->tiles_computed += s.tiles_computed;
        total->tiles_skipped += s.tiles_skipped;
        total->useful_flops += s.useful_flops;
      }
    }
    std::vector<float> out(static_cast<std::size_t>(nq * heads * head_dim)), lse(static_cast<std::size_t>(nq * heads));
    finalize(st, out.data(), lse.data());
    std::vector<double> rout(out.size()), rlse(lse.size());
    oracle::dense_attention_f64({heads, kv_heads, head_dim, mask, 0.0}, q.data(), qp, k.data(), v.data(),
                                Positions::from_sorted(kpos.data(), nk), rout.data(), rlse.data(), qd.data(), kd.data());
    return fixture::compare(out, lse, rout, rlse);
  }
};

std::vector<std::int64_t> range(std::int64_t a, std::int64_t b) {
  std::vector<std::int64_t> r(static_cast<std::size_t>(b - a));
  std::iota(r.begin(), r.end(), a);
  return r;
}

// Every `step`-th token of [0, n) plus a second run, as a zigzag-like shard would hold.
std::vector<std::int64_t> two_runs(std::int64_t a0, std::int64_t a1, std::int64_t b0, std::int64_t b1) {
  auto r = range(a0, a1);
  const auto s = range(b0, b1);
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

}  // namespace

TEST_CASE("documents: kernel matches float64 per-document attention on every ISA path, mask and dtype") {
  struct Case {
    const char* what;
    std::vector<std::int64_t> lengths, qpos, kpos;
    int pieces;
  };
  const std::vector<std::int64_t> tiny = {1, 2, 1, 1, 2, 3, 1, 2, 50, 1, 2};
  const std::int64_t tiny_n = std::accumulate(tiny.begin(), tiny.end(), std::int64_t{0});
  const std::vector<Case> cases = {
      {"tiny documents (length 1 and 2)", tiny, range(0, tiny_n), range(0, tiny_n), 1},
      {"documents spanning tiles", {700, 1, 1300, 2, 300}, range(0, 2303), range(0, 2303), 1},
      {"query rows in two runs, keys in pieces", {90, 400, 3, 600, 17},
       two_runs(50, 300, 800, 1110), range(0, 1110), 3},
      {"keys from another part of the batch", {200, 200, 200, 200}, range(150, 420), range(380, 800), 2},
      {"keys past one 4096-key chunk", {2000, 1, 2600, 10}, two_runs(1990, 2010, 4560, 4611), range(0, 4611), 1},
      {"no common document", {100, 100, 100}, range(0, 100), range(200, 300), 1},
      // Whole documents on two ranks sharing one: the queries' strips span documents 0-4,
      // whose keys here are documents 1, 2, 3 and 5 (only 2 in common).
      {"whole documents of two ranks", {30, 30, 30, 30, 30, 30},
       [] {
         auto r = two_runs(0, 30, 60, 90);
         const auto s = range(120, 150);
         r.insert(r.end(), s.begin(), s.end());
         return r;
       }(),
       [] {
         auto r = range(30, 120);
         const auto s = range(150, 180);
         r.insert(r.end(), s.begin(), s.end());
         return r;
       }(),
       1},
  };
  for (Isa isa : available_isas())
    for (DType dt : {DType::f32, DType::bf16})
      for (Mask mask : {Mask::none(), Mask::causal(), Mask::sliding_window(37)}) {
        unsigned seed = 3;
        for (const auto& c : cases) {
          PackedProblem p;
          p.cu = cumulative(c.lengths);
          p.qpos = c.qpos;
          p.kpos = c.kpos;
          p.mask = mask;
          p.dtype = dt;
          CAPTURE(to_string(isa));
          CAPTURE(to_string(dt));
          CAPTURE(to_string(mask));
          CAPTURE(c.what);
          const auto e = p.run(isa, c.pieces, seed++);
          CHECK_FALSE(e.nan);
          CHECK(e.out <= (dt == DType::f32 ? kTolF32 : kTolBf16));
          CHECK(e.lse <= kTolLse);
        }
      }
}

TEST_CASE("documents: tiles whose queries and keys share no document are skipped, not computed") {
  // Two documents of 512 tokens, queries and keys over both: per head the 256-row query
  // tiles 0-1 (document 0) meet the key tiles of keys 0-511, tiles 2-3 those of 512-1023.
  PackedProblem p;
  p.cu = {0, 512, 1024};
  p.qpos = range(0, 1024);
  p.kpos = range(0, 1024);
  p.heads = 8;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.mask = Mask::none();
  FoldStats s;
  const auto e = p.run(default_isa(), 1, 9, &s);
  CHECK(e.out <= kTolF32);
  AttentionConfig c;
  c.heads = c.kv_heads = 8;
  c.head_dim = 128;
  // 4 query tiles x 2 key tiles of 512 (brgemm) or 4 of 256 (gemm:jit) per head; half
  // of the pairs lie within one document.
  const std::int64_t key_tiles = 1024 / BlockAttention(c).tile_keys();
  CHECK(s.tiles_computed == 8 * 4 * key_tiles / 2);
  CHECK(s.tiles_skipped == 8 * 4 * key_tiles / 2);
  CHECK(s.useful_flops == doctest::Approx(4.0 * 128 * 8 * (2 * 512.0 * 512.0)));

  // Disjoint documents: nothing computed, the rows stay empty.
  PackedProblem none = p;
  none.qpos = range(0, 512);
  none.kpos = range(512, 1024);
  FoldStats z;
  none.run(default_isa(), 1, 9, &z);
  CHECK(z.tiles_computed == 0);
  CHECK(z.useful_flops == 0);
}

TEST_CASE("documents: useful FLOPs count only pairs in a common document") {
  PackedProblem p;
  p.cu = {0, 100, 137, 1037};
  p.qpos = range(0, 1037);
  p.kpos = range(0, 1037);
  p.mask = Mask::causal();
  FoldStats s;
  p.run(default_isa(), 2, 5, &s);
  const double pairs = 100.0 * 101 / 2 + 37.0 * 38 / 2 + 900.0 * 901 / 2;
  CHECK(s.useful_flops == doctest::Approx(4.0 * 64 * 4 * pairs));
}

TEST_CASE("documents: bad document ids are refused before anything is computed") {
  AttentionConfig c;
  c.heads = 2;
  c.kv_heads = 2;
  c.head_dim = 32;
  BlockAttention attn(c);
  std::vector<float> q(4 * 2 * 32, 0.5f), kv(4 * 2 * 32, 0.25f);
  const Positions pos = Positions::contiguous(0, 4);
  OnlineSoftmaxState st(4, 2, 32);
  const std::vector<std::int32_t> good = {0, 0, 1, 1}, down = {0, 1, 0, 1}, short_ = {0, 0, 1};
  CHECK_THROWS_WITH_AS(attn.fold(q.data(), pos, down, kv.data(), kv.data(), pos, good, st),
                       doctest::Contains("decrease at row 2"), InvalidArgument);
  CHECK_THROWS_WITH_AS(attn.fold(q.data(), pos, good, kv.data(), kv.data(), pos, short_, st),
                       doctest::Contains("3 document ids for 4 rows"), InvalidArgument);
  CHECK_THROWS_AS(attn.fold(q.data(), pos, good, kv.data(), kv.data(), pos, {}, st), InvalidArgument);
  CHECK_NOTHROW(attn.fold(q.data(), pos, good, kv.data(), kv.data(), pos, good, st));
}

TEST_CASE("documents: a NaN in one document's keys does not reach the queries of another") {
  AttentionConfig c;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 32;
  c.mask = Mask::causal();
  for (Isa isa : available_isas()) {
    c.isa = isa;
    BlockAttention attn(c);
    const std::int64_t n = 300;
    auto q = oracle::random_normal(static_cast<std::size_t>(n * 2 * 32), 1);
    auto k = oracle::random_normal(static_cast<std::size_t>(n * 32), 2);
    auto v = oracle::random_normal(static_cast<std::size_t>(n * 32), 3);
    k[5 * 32 + 3] = std::numeric_limits<float>::quiet_NaN();  // row 5: document 0
    v[7 * 32 + 4] = std::numeric_limits<float>::infinity();    // row 7: document 0
    std::vector<std::int32_t> docs(static_cast<std::size_t>(n), 1);
    std::fill(docs.begin(), docs.begin() + 100, 0);
    const Positions pos = Positions::contiguous(0, n);
    OnlineSoftmaxState st(n, 2, 32);
    attn.fold(q.data(), pos, docs, k.data(), v.data(), pos, docs, st);
    std::vector<float> out(static_cast<std::size_t>(n * 2 * 32)), lse(static_cast<std::size_t>(n * 2));
    finalize(st, out.data(), lse.data());
    CAPTURE(to_string(isa));
    CHECK(std::isnan(lse[50 * 2]));  // document 0, after row 5: poisoned
    CHECK(std::isfinite(lse[3 * 2]));  // document 0, before row 5
    for (std::int64_t i = 100; i < n; ++i) CHECK(std::isfinite(lse[static_cast<std::size_t>(i * 2)]));
    bool finite = true;
    for (std::size_t i = 100 * 2 * 32; i < out.size(); ++i) finite = finite && std::isfinite(out[i]);
    CHECK(finite);
  }
}
