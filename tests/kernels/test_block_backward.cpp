// The block-attention backward kernel (include/ringattn/block_backward.hpp) against the
// float64 analytic gradients of src/oracle/backward.hpp: every ISA path this CPU runs ×
// fp32/bf16 × none/causal/window × GQA ratios × head dims 32–256, documents, strided
// positions, keys folded in several uneven blocks (as the ring does), a block wider than
// the kernel's key chunk, fully masked rows (zero, never NaN), and the input checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ringattn/block_backward.hpp"
#include "ringattn/error.hpp"
#include "src/oracle/backward.hpp"
#include "src/oracle/random_inputs.hpp"
#include "src/oracle/reference.hpp"

namespace ringattn {
namespace {

using oracle::random_normal;
using oracle::round_to_bf16;

struct Case {
  std::int64_t nq, nk, heads, kv_heads, head_dim;
  Mask mask;
  std::int64_t q_first = 0, k_first = 0, stride = 1;  // positions first + stride * row
  bool documents = false;
  std::vector<std::int64_t> blocks{};  // key block sizes the keys are folded in (empty: one)
};

struct Result {
  double dq = 0, dk = 0, dv = 0;  // max |kernel − oracle| / max |oracle|, per tensor
  bool finite = true;
  bool masked_rows_zero = true;   // rows that see no key have dq exactly 0
};

double rel_error(const std::vector<float>& got, const std::vector<double>& want, bool& finite) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) finite = false;
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? err / scale : err;
}

// Document ids for n rows: runs of varying length (ids non-decreasing), the same
// sequence for queries and keys when their positions coincide.
std::vector<std::int32_t> documents_for(std::int64_t first, std::int64_t stride, std::int64_t n) {
  std::vector<std::int32_t> d(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t p = first + stride * i;
    // Boundaries at 0, 37, 37+150, ... of growing lengths.
    std::int32_t id = 0;
    for (std::int64_t edge = 37, len = 150; p >= edge; edge += len, len += 113) ++id;
    d[static_cast<std::size_t>(i)] = id;
  }
  return d;
}

// One case's inputs, the forward's O and lse as the backward gets them (fp32), D, and the
// float64 gradients: the same for every ISA path, so made once per case and dtype.
struct Reference {
  std::vector<float> q, k, v, d_o, lse, delta;
  std::vector<std::uint16_t> qh, kh, vh, doh;
  std::vector<std::int32_t> qd, kd;
  std::vector<double> dq, dk, dv;
};

Reference make_reference(const Case& c, DType dtype, unsigned seed = 7) {
  const std::int64_t H = c.heads, KH = c.kv_heads, D = c.head_dim;
  Reference r;
  r.q = random_normal(static_cast<std::size_t>(c.nq * H * D), seed);
  r.k = random_normal(static_cast<std::size_t>(c.nk * KH * D), seed + 1);
  r.v = random_normal(static_cast<std::size_t>(c.nk * KH * D), seed + 2);
  r.d_o = random_normal(static_cast<std::size_t>(c.nq * H * D), seed + 3);
  if (dtype == DType::bf16) {  // rounds the fp32 copies too: the oracle sees what the kernel sees
    r.qh = round_to_bf16(r.q);
    r.kh = round_to_bf16(r.k);
    r.vh = round_to_bf16(r.v);
    r.doh = round_to_bf16(r.d_o);
  }
  const Positions qpos = Positions::strided(c.q_first, c.stride, c.nq);
  const Positions kpos = Positions::strided(c.k_first, c.stride, c.nk);
  if (c.documents) {
    r.qd = documents_for(c.q_first, c.stride, c.nq);
    r.kd = documents_for(c.k_first, c.stride, c.nk);
  }
  const std::int32_t* qd = c.documents ? r.qd.data() : nullptr;
  const std::int32_t* kd = c.documents ? r.kd.data() : nullptr;
  const oracle::DenseShape shape{H, KH, D, c.mask, 0.0};
  std::vector<double> o64(r.q.size()), lse64(static_cast<std::size_t>(c.nq * H));
  oracle::dense_attention_f64(shape, r.q.data(), qpos, r.k.data(), r.v.data(), kpos, o64.data(), lse64.data(), qd, kd);
  const std::vector<float> o(o64.begin(), o64.end());
  r.lse.assign(lse64.begin(), lse64.end());
  r.delta.resize(r.lse.size());
  attention_backward_delta(o.data(), r.d_o.data(), c.nq, H, D, r.delta.data());
  r.dq.resize(r.q.size());
  r.dk.resize(r.k.size());
  r.dv.resize(r.v.size());
  oracle::dense_attention_backward_f64(shape, r.q.data(), qpos, r.k.data(), r.v.data(), kpos, r.d_o.data(), r.dq.data(),
                                       r.dk.data(), r.dv.data(), qd, kd);
  return r;
}

// The kernel on one path, the keys folded in c.blocks, against the reference. One thread
// adds dQ by its matmul in place, more through per-piece scratch under locks: both run.
Result run_kernel(const Case& c, const Reference& ref, Isa isa, DType dtype, int threads = 0) {
  const std::int64_t H = c.heads, KH = c.kv_heads, D = c.head_dim;
  AttentionConfig cfg;
  cfg.heads = H;
  cfg.kv_heads = KH;
  cfg.head_dim = D;
  cfg.dtype = dtype;
  cfg.mask = c.mask;
  cfg.isa = isa;
  cfg.threads = threads;
  BlockAttentionBackward bwd(cfg);
  std::vector<float> dq(ref.q.size(), 0.0f), dk(ref.k.size(), 0.0f), dv(ref.v.size(), 0.0f);
  auto ptr = [&](const std::vector<float>& f, const std::vector<std::uint16_t>& b, std::int64_t off) -> const void* {
    return dtype == DType::bf16 ? static_cast<const void*>(b.data() + off) : static_cast<const void*>(f.data() + off);
  };
  const Positions qpos = Positions::strided(c.q_first, c.stride, c.nq);
  const std::vector<std::int64_t> blocks = c.blocks.empty() ? std::vector<std::int64_t>{c.nk} : c.blocks;
  std::int64_t r0 = 0;
  for (std::int64_t n : blocks) {
    const std::int64_t off = r0 * KH * D;
    const Positions bpos = Positions::strided(c.k_first + c.stride * r0, c.stride, n);
    const std::span<const std::int32_t> bd =
        c.documents ? std::span<const std::int32_t>(ref.kd.data() + r0, static_cast<std::size_t>(n))
                    : std::span<const std::int32_t>{};
    bwd.accumulate(ptr(ref.q, ref.qh, 0), qpos, ref.qd, ptr(ref.k, ref.kh, off), ptr(ref.v, ref.vh, off), bpos, bd,
                   ptr(ref.d_o, ref.doh, 0), ref.lse.data(), ref.delta.data(), dq.data(), dk.data() + off,
                   dv.data() + off);
    r0 += n;
  }
  REQUIRE(r0 == c.nk);
  Result r;
  r.dq = rel_error(dq, ref.dq, r.finite);
  r.dk = rel_error(dk, ref.dk, r.finite);
  r.dv = rel_error(dv, ref.dv, r.finite);
  for (std::int64_t i = 0; i < c.nq * H; ++i)
    if (ref.lse[static_cast<std::size_t>(i)] == -std::numeric_limits<float>::infinity())
      for (std::int64_t e = 0; e < D; ++e)
        if (dq[static_cast<std::size_t>(i * D + e)] != 0.0f) r.masked_rows_zero = false;
  return r;
}


// Measured (Zen 4, every path): fp32 1.3e-6, bf16 3.5e-3 (P and dS are rounded to bf16
// before their matmuls, as FlashAttention does). A 1 % error in D fails every fp32 case.
double tolerance(DType dt) { return dt == DType::bf16 ? 1e-2 : 1e-5; }

void check(const Case& c, const Reference& ref, Isa isa, DType dt, int threads) {
  const Result r = run_kernel(c, ref, isa, dt, threads);
  CAPTURE(r.dq);
  CAPTURE(r.dk);
  CAPTURE(r.dv);
  CHECK(r.finite);
  CHECK(r.masked_rows_zero);
  CHECK(r.dq <= tolerance(dt));
  CHECK(r.dk <= tolerance(dt));
  CHECK(r.dv <= tolerance(dt));
}

std::string describe(const Case& c) {
  return std::to_string(c.nq) + "q x " + std::to_string(c.nk) + "k, heads " + std::to_string(c.heads) + "/" +
         std::to_string(c.kv_heads) + ", d " + std::to_string(c.head_dim) + ", " + to_string(c.mask) +
         (c.documents ? ", documents" : "") + (c.stride > 1 ? ", stride " + std::to_string(c.stride) : "") +
         ", " + std::to_string(c.blocks.empty() ? 1 : c.blocks.size()) + " block(s)";
}

}  // namespace

TEST_CASE("block backward: every ISA path x dtype x mask x GQA x head dim against the float64 gradients") {
  const Mask masks[] = {Mask::none(), Mask::causal(), Mask::sliding_window(97)};
  // (heads, kv_heads, head_dim): MHA, GQA 2:1 and 4:1, MQA, over the head dims.
  const std::int64_t shapes[][3] = {{2, 2, 32}, {4, 2, 64}, {4, 1, 128}, {2, 1, 256}, {3, 3, 80}, {4, 2, 48}};
  for (DType dt : {DType::f32, DType::bf16})
    for (const Mask& m : masks)
      for (std::size_t i = 0; i < std::size(shapes); ++i) {
        const auto& s = shapes[i];
        // Queries after the keys' start (a later rank's queries), keys in three uneven
        // blocks of which the last is ragged against the 256-key tile.
        const Case c{300, 600, s[0], s[1], s[2], m, 350, 0, 1, false, {257, 43, 300}};
        const Reference ref = make_reference(c, dt);
        const int threads = 1 + static_cast<int>(i % 2);
        for (Isa isa : available_isas()) {
          const std::string what = std::string(to_string(isa)) + " " + std::string(to_string(dt)) + ", " +
                                   std::to_string(threads) + " thread(s): " + describe(c);
          CAPTURE(what);
          check(c, ref, isa, dt, threads);
        }
      }
}

TEST_CASE("block backward: documents, strided positions (striped layout) and a block wider than a key chunk") {
  for (DType dt : {DType::f32, DType::bf16}) {
    const Case cases[] = {
          {400, 700, 4, 2, 64, Mask::causal(), 0, 0, 1, true, {300, 400}},
          {400, 700, 2, 1, 128, Mask::none(), 0, 0, 1, true, {}},
          {300, 300, 4, 2, 64, Mask::causal(), 1, 0, 3, false, {}},  // rank 1 of 3, striped
          {300, 300, 2, 2, 32, Mask::sliding_window(40), 2, 0, 3, true, {150, 150}},
          {64, 4500, 2, 1, 64, Mask::none(), 4400, 0, 1, false, {}},  // three key chunks in one call
      };
    for (std::size_t i = 0; i < std::size(cases); ++i) {
      const Case& c = cases[i];
      const Reference ref = make_reference(c, dt);
      const int threads = 2 - static_cast<int>(i % 2);
      for (Isa isa : available_isas()) {
        const std::string what = std::string(to_string(isa)) + " " + std::string(to_string(dt)) + ", " +
                                 std::to_string(threads) + " thread(s): " + describe(c);
        CAPTURE(what);
        check(c, ref, isa, dt, threads);
      }
    }
  }
}

TEST_CASE("block backward: rows that see no key get zero gradients, never NaN; hidden blocks add nothing") {
  // Causal, queries 0..299 against keys 200..499: rows 0..199 see no key (lse = -inf).
  const Case masked{300, 300, 2, 1, 64, Mask::causal(), 0, 200, 1, false, {}};
  const Reference masked_ref = make_reference(masked, DType::f32);
  for (Isa isa : available_isas()) {
    const Result r = run_kernel(masked, masked_ref, isa, DType::f32);
    CHECK(r.finite);
    CHECK(r.masked_rows_zero);
    CHECK(r.dq <= tolerance(DType::f32));
    CHECK(r.dk <= tolerance(DType::f32));
  }
  // A block wholly in the future of every query: accumulate leaves dq, dk, dv untouched.
  AttentionConfig cfg;
  cfg.heads = 2;
  cfg.kv_heads = 2;
  cfg.head_dim = 32;
  cfg.mask = Mask::causal();
  BlockAttentionBackward bwd(cfg);
  std::vector<float> q(64 * 64, 0.5f), kv(64 * 64, 0.25f), lse(128, 1.0f), delta(128, 0.0f);
  std::vector<float> dq(q.size(), 3.0f), dk(kv.size(), 4.0f), dv(kv.size(), 5.0f);
  const GradientStats st = bwd.accumulate(q.data(), Positions::contiguous(0, 64), {}, kv.data(), kv.data(),
                                          Positions::contiguous(100, 64), {}, q.data(), lse.data(), delta.data(),
                                          dq.data(), dk.data(), dv.data());
  CHECK(st.tiles_computed == 0);
  CHECK(st.tiles_skipped == 2);
  CHECK(st.useful_flops == 0);
  CHECK(std::all_of(dq.begin(), dq.end(), [](float x) { return x == 3.0f; }));
  CHECK(std::all_of(dk.begin(), dk.end(), [](float x) { return x == 4.0f; }));
  CHECK(std::all_of(dv.begin(), dv.end(), [](float x) { return x == 5.0f; }));
}

TEST_CASE("block backward: useful FLOPs are 2.5x the forward's for the same pairs") {
  AttentionConfig cfg;
  cfg.heads = 2;
  cfg.kv_heads = 1;
  cfg.head_dim = 64;
  cfg.mask = Mask::causal();
  BlockAttentionBackward bwd(cfg);
  BlockAttention fwd(cfg);
  const std::int64_t n = 300;
  std::vector<float> q = random_normal(static_cast<std::size_t>(n * 2 * 64), 1), k = random_normal(n * 64, 2),
                     lse(static_cast<std::size_t>(n * 2), 10.0f), delta(lse.size(), 0.0f);
  std::vector<float> dq(q.size()), dk(k.size()), dv(k.size());
  OnlineSoftmaxState state(n, 2, 64);
  const Positions pos = Positions::contiguous(0, n);
  const FoldStats f = fwd.fold(q.data(), pos, k.data(), k.data(), pos, state);
  const GradientStats b = bwd.accumulate(q.data(), pos, {}, k.data(), k.data(), pos, {}, q.data(), lse.data(),
                                         delta.data(), dq.data(), dk.data(), dv.data());
  CHECK(b.useful_flops == doctest::Approx(2.5 * f.useful_flops));
  CHECK(b.useful_flops == doctest::Approx(10.0 * (n * (n + 1) / 2) * 64 * 2));
}

TEST_CASE("block backward: non-finite inputs and bad arguments are refused before anything is added") {
  AttentionConfig cfg;
  cfg.heads = 2;
  cfg.kv_heads = 1;
  cfg.head_dim = 32;
  BlockAttentionBackward bwd(cfg);
  const std::int64_t n = 40;
  std::vector<float> q = random_normal(static_cast<std::size_t>(n * 2 * 32), 1), k = random_normal(n * 32, 2),
                     v = random_normal(n * 32, 3), d_o = random_normal(q.size(), 4), lse(n * 2, 2.0f),
                     delta(n * 2, 0.1f);
  std::vector<float> dq(q.size(), 1.0f), dk(k.size(), 1.0f), dv(v.size(), 1.0f);
  const Positions pos = Positions::contiguous(0, n);
  auto call = [&] {
    bwd.accumulate(q.data(), pos, {}, k.data(), v.data(), pos, {}, d_o.data(), lse.data(), delta.data(), dq.data(),
                   dk.data(), dv.data());
  };
  auto refused = [&](const char* what, auto&& spoil, auto&& restore) {
    CAPTURE(what);
    spoil();
    CHECK_THROWS_WITH_AS(call(), doctest::Contains(what), InvalidArgument);
    restore();
    CHECK(std::all_of(dq.begin(), dq.end(), [](float x) { return x == 1.0f; }));
    CHECK(std::all_of(dk.begin(), dk.end(), [](float x) { return x == 1.0f; }));
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  refused("q holds NaN or inf", [&] { q[77] = nan; }, [&] { q[77] = 0.5f; });
  refused("k holds NaN or inf", [&] { k[5] = inf; }, [&] { k[5] = 0.5f; });
  refused("v holds NaN or inf", [&] { v[1000] = -inf; }, [&] { v[1000] = 0.5f; });
  refused("d_o holds NaN or inf", [&] { d_o[3] = nan; }, [&] { d_o[3] = 0.5f; });
  refused("delta holds NaN or inf", [&] { delta[9] = inf; }, [&] { delta[9] = 0.1f; });
  refused("lse at row 4, head 1", [&] { lse[9] = inf; }, [&] { lse[9] = 2.0f; });
  refused("lse at row 0, head 1", [&] { lse[1] = nan; }, [&] { lse[1] = 2.0f; });
  // Documents that decrease, and a count that differs, name the side.
  std::vector<std::int32_t> docs(n, 0);
  docs[10] = -1;
  CHECK_THROWS_WITH_AS(bwd.accumulate(q.data(), pos, docs, k.data(), v.data(), pos, std::vector<std::int32_t>(n, 0),
                                      d_o.data(), lse.data(), delta.data(), dq.data(), dk.data(), dv.data()),
                       doctest::Contains("the queries' document ids decrease at row 10"), InvalidArgument);
  CHECK_THROWS_WITH_AS(bwd.accumulate(q.data(), pos, {}, k.data(), v.data(), pos, {}, d_o.data(), nullptr,
                                      delta.data(), dq.data(), dk.data(), dv.data()),
                       doctest::Contains("lse is a null pointer"), InvalidArgument);
  // delta's own check names o or d_o with the row.
  std::vector<float> o(q.size(), 0.25f);
  o[2 * 32 * 3 + 32 + 5] = nan;  // row 3, head 1
  CHECK_THROWS_WITH_AS(attention_backward_delta(o.data(), d_o.data(), n, 2, 32, delta.data()),
                       doctest::Contains("o holds NaN or inf at row 3, head 1"), InvalidArgument);
  // A config the forward refuses, the backward refuses alike.
  AttentionConfig bad = cfg;
  bad.head_dim = 40;
  CHECK_THROWS_WITH_AS(BlockAttentionBackward{bad}, doctest::Contains("head_dim = 40 is not supported"),
                       InvalidArgument);
}

}  // namespace ringattn
