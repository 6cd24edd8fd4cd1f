// The block-attention kernel on every ISA path against the float64 dense reference.
//
// Tolerances (unit-scale normal inputs, scale 1/sqrt(d)):
//   fp32: max abs error of O <= 2e-5, of lse <= 2e-5.
//   bf16: Q, K, V are rounded to bf16 first and the reference is computed on the
//         rounded values, so what remains is the bf16 rounding of the probabilities
//         (relative 2^-9) before the P·V matmul: max abs error of O <= 1e-2, lse <= 2e-5
//         (lse comes from fp32 scores and fp32 sums of the rounded probabilities).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>

#include "attention_fixture.hpp"

using namespace ringattn;
using fixture::Problem;

namespace {

constexpr double kTolF32 = 2e-5;
constexpr double kTolBf16 = 1e-2;
constexpr double kTolLse = 2e-5;

fixture::Errors run_pieces(const Problem& p, Isa isa, const std::vector<std::int64_t>& cuts) {
  BlockAttention attn(p.config(isa));
  OnlineSoftmaxState st(p.nq, p.heads, p.head_dim);
  std::int64_t r0 = 0;
  for (std::size_t i = 0; i <= cuts.size(); ++i) {
    const std::int64_t r1 = i < cuts.size() ? cuts[i] : p.nk;
    attn.fold(p.qp(), p.q_pos(), p.kp(r0), p.vp(r0), p.k_pos(r0, r1 - r0), st);
    r0 = r1;
  }
  std::vector<float> out(static_cast<std::size_t>(p.nq * p.heads * p.head_dim)), lse(static_cast<std::size_t>(p.nq * p.heads));
  finalize(st, out.data(), lse.data());
  std::vector<double> rout, rlse;
  p.reference(rout, rlse);
  return fixture::compare(out, lse, rout, rlse);
}

}  // namespace

TEST_CASE("kernel matches the float64 reference on every ISA path, shape, GQA ratio and mask") {
  struct Case {
    std::int64_t nq, nk, heads, kv, d;
    Mask mask;
    std::int64_t qf, kf;
  };
  const Case cases[] = {
      {64, 256, 8, 8, 128, Mask::none(), 0, 0},           // exact tiles
      {1, 1, 8, 8, 64, Mask::none(), 0, 0},               // 1-row blocks
      {1, 300, 8, 2, 80, Mask::causal(), 500, 300},       // one query late in the sequence
      {77, 129, 8, 1, 64, Mask::causal(), 1000, 950},     // MQA, causal diagonal inside the block
      {130, 257, 8, 2, 128, Mask::causal(), 128, 0},      // odd sizes, GQA, partially masked tiles
      {100, 333, 8, 8, 80, Mask::sliding_window(37), 2000, 1800},
      {65, 200, 8, 1, 128, Mask::sliding_window(500), 300, 150},
      {70, 90, 8, 8, 64, Mask::causal(), 0, 5000},        // keys all in the future: fully masked
      {90, 311, 8, 2, 64, Mask::none(), 7, 123456},
      {70, 4700, 8, 2, 64, Mask::causal(), 4650, 0},      // more keys than one 4096-key chunk
      {40, 9000, 8, 1, 64, Mask::sliding_window(3000), 8990, 0},  // window spanning chunks
  };
  for (Isa isa : available_isas()) {
    for (DType dt : {DType::f32, DType::bf16}) {
      unsigned seed = 11;
      for (const auto& c : cases) {
        Problem p{c.nq, c.nk, c.heads, c.kv, c.d, c.mask, c.qf, c.kf, dt, seed++};
        p.make();
        CAPTURE(to_string(isa));
        CAPTURE(to_string(dt));
        CAPTURE(c.nq);
        CAPTURE(c.nk);
        CAPTURE(c.kv);
        CAPTURE(c.d);
        CAPTURE(to_string(c.mask));
        auto e = run_pieces(p, isa, {});
        CHECK_FALSE(e.nan);
        CHECK(e.out <= (dt == DType::f32 ? kTolF32 : kTolBf16));
        CHECK(e.lse <= kTolLse);
      }
    }
  }
}

TEST_CASE("splitting the keys into 1..8 pieces gives the same answer (any cut points)") {
  Problem p{96, 400, 8, 2, 64, Mask::causal(), 400, 100, DType::f32, 5};
  p.make();
  std::mt19937 rng(3);
  for (Isa isa : available_isas()) {
    for (int pieces = 1; pieces <= 8; ++pieces) {
      std::vector<std::int64_t> cuts;
      std::uniform_int_distribution<std::int64_t> d(1, p.nk - 1);
      while (static_cast<int>(cuts.size()) < pieces - 1) {
        auto c = d(rng);
        if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
      }
      std::sort(cuts.begin(), cuts.end());
      CAPTURE(to_string(isa));
      CAPTURE(pieces);
      auto e = run_pieces(p, isa, cuts);
      CHECK(e.out <= kTolF32);
      CHECK(e.lse <= kTolLse);
    }
  }
}

TEST_CASE("mask uses global positions: shifting the keys' offsets changes the causal answer") {
  // Same data, keys placed before vs after the queries: a kernel that ignored the
  // offsets (local positions 0..n-1) would give identical results for both.
  Problem before{64, 64, 8, 8, 64, Mask::causal(), 1000, 0, DType::f32, 9};
  Problem after = before;
  after.k_first = 2000;
  before.make();
  after.make();
  BlockAttention attn(before.config(std::nullopt));
  OnlineSoftmaxState a(64, 8, 64), b(64, 8, 64);
  attn.fold(before.qp(), before.q_pos(), before.kp(0), before.vp(0), before.k_pos(0, 64), a);
  auto st = attn.fold(after.qp(), after.q_pos(), after.kp(0), after.vp(0), after.k_pos(0, 64), b);
  CHECK(st.tiles_skipped == 8);  // every tile of every head hidden
  CHECK(st.tiles_computed == 0);
  CHECK(st.useful_flops == 0);
  for (float m : a.m) CHECK(std::isfinite(m));
  for (float m : b.m) CHECK(std::isinf(m));
}

TEST_CASE("causal skips hidden tiles and counts only visible pairs as useful FLOPs") {
  Problem p{1024, 1024, 8, 8, 128, Mask::causal(), 0, 0, DType::f32, 2};
  p.make();
  BlockAttention attn(p.config(std::nullopt));
  OnlineSoftmaxState st(1024, 8, 128);
  auto s = attn.fold(p.qp(), p.q_pos(), p.kp(0), p.vp(0), p.k_pos(0, 1024), st);
  // Per head, a query tile sees the key tiles that start at or before its last row:
  // 256-row query tiles x 512-key tiles (brgemm): 6 pairs computed, 2 hidden (key tile
  // 1 from query tiles 0 and 1); x 256-key tiles (gemm:jit): 10 computed, 6 hidden.
  REQUIRE(attn.tile_rows() == 256);
  REQUIRE((attn.tile_keys() == 512 || attn.tile_keys() == 256));
  const std::int64_t pairs = 4 * (1024 / attn.tile_keys()), computed = attn.tile_keys() == 512 ? 6 : 10;
  CHECK(s.tiles_computed == 8 * computed);
  CHECK(s.tiles_skipped == 8 * (pairs - computed));
  CHECK(s.useful_flops == doctest::Approx(4.0 * 128 * 8 * (1024.0 * 1025.0 / 2.0)));
}

TEST_CASE("a fold ticks its progress counter once per computed tile, so a ring sees it advancing") {
  Problem p{1024, 1024, 8, 8, 128, Mask::causal(), 0, 0, DType::f32, 2};
  p.make();
  BlockAttention attn(p.config(std::nullopt));
  std::atomic<std::uint64_t> ticks{0};
  attn.set_progress_counter(&ticks);
  OnlineSoftmaxState st(1024, 8, 128);
  const auto s = attn.fold(p.qp(), p.q_pos(), p.kp(0), p.vp(0), p.k_pos(0, 1024), st);
  CHECK(ticks.load() >= static_cast<std::uint64_t>(s.tiles_computed));  // diagonal tiles tick once per strip
  const std::uint64_t after_first = ticks.load();
  attn.set_progress_counter(nullptr);
  st.reset();
  attn.fold(p.qp(), p.q_pos(), p.kp(0), p.vp(0), p.k_pos(0, 1024), st);
  CHECK(ticks.load() == after_first);  // unhooked: no more ticks
}

TEST_CASE("fully masked rows give O = 0 and lse = -inf, never NaN") {
  // Queries at 0..9 with a window of 3 against keys at 100..139: nothing visible.
  Problem p{10, 40, 8, 2, 64, Mask::sliding_window(3), 0, 100, DType::f32, 4};
  p.make();
  for (Isa isa : available_isas()) {
    BlockAttention attn(p.config(isa));
    OnlineSoftmaxState st(10, 8, 64);
    attn.fold(p.qp(), p.q_pos(), p.kp(0), p.vp(0), p.k_pos(0, 40), st);
    std::vector<float> out(10 * 8 * 64, 1.0f), lse(10 * 8, 0.0f);
    finalize(st, out.data(), lse.data());
    for (float x : out) CHECK(x == 0.0f);
    for (float x : lse) CHECK((std::isinf(x) && x < 0));
  }
}

TEST_CASE("the same inputs give bit-identical outputs (determinism)") {
  Problem p{150, 300, 8, 2, 128, Mask::causal(), 200, 0, DType::f32, 8};
  p.make();
  auto once = [&] {
    BlockAttention attn(p.config(std::nullopt));
    OnlineSoftmaxState st(p.nq, p.heads, p.head_dim);
    attn.fold(p.qp(), p.q_pos(), p.kp(0), p.vp(0), p.k_pos(0, p.nk), st);
    return st.o;
  };
  CHECK(once() == once());
}
