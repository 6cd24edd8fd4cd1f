// NaN and inf in Q, K, V: the kernel must give what the float64 reference gives (see the
// semantics in block_attention.hpp), on every ISA path, dtype and mask.
//
// Every case is checked three ways, element by element of O and lse:
//   - where the reference is NaN, the kernel is NaN;
//   - everywhere else the kernel is bit for bit the same fold with the bad entries
//     replaced by 0 (a hidden or unused bad value changes nothing at all), and
//   - within the usual tolerance of the reference (fp32 2e-5, bf16 1e-2, lse 2e-5).
// The cases are the audit's: V[200] NaN under causal leaked into rows 192..199 (the
// 64-row strip is computed over whole 64-key columns); V[100] inf with a 16-key window
// into rows 64..191; a NaN in Q zeroed its row; a NaN key was dropped; an inf in K.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "attention_fixture.hpp"

using namespace ringattn;
using fixture::Problem;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// One bad element: tensor 'q' (row, head, element) or 'k'/'v' (row, kv head, element).
struct Bad {
  char tensor;
  std::int64_t row, head, elem;
  float value;
};

void put(Problem& p, const Bad& b, float value) {
  const bool is_q = b.tensor == 'q';
  auto& f = is_q ? p.q : b.tensor == 'k' ? p.k : p.v;
  auto& h = is_q ? p.qh : b.tensor == 'k' ? p.kh : p.vh;
  const std::int64_t heads = is_q ? p.heads : p.kv_heads;
  const auto i = static_cast<std::size_t>((b.row * heads + b.head) * p.head_dim + b.elem);
  f[i] = value;
  if (p.dtype == DType::bf16) to_bf16(&f[i], &h[i], 1);
}

struct Result {
  std::vector<float> out, lse;
};

// Folds the keys in pieces (cut points `cuts`) into one state, as the ring does.
Result run(const Problem& p, Isa isa, const std::vector<std::int64_t>& cuts) {
  BlockAttention attn(p.config(isa));
  OnlineSoftmaxState st(p.nq, p.heads, p.head_dim);
  std::int64_t r0 = 0;
  for (std::size_t i = 0; i <= cuts.size(); ++i) {
    const std::int64_t r1 = i < cuts.size() ? cuts[i] : p.nk;
    attn.fold(p.qp(), p.q_pos(), p.kp(r0), p.vp(r0), p.k_pos(r0, r1 - r0), st);
    r0 = r1;
  }
  Result r{std::vector<float>(st.o.size()), std::vector<float>(st.m.size())};
  finalize(st, r.out.data(), r.lse.data());
  return r;
}

struct Mismatch {
  std::int64_t count = 0;
  std::int64_t first = -1;
  void add(std::int64_t i) {
    if (count++ == 0) first = i;
  }
};

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

// The three checks of the file comment over one of O or lse.
void check_against(const std::vector<float>& got, const std::vector<float>& zeroed, const std::vector<double>& ref,
                   double tol, const char* what) {
  Mismatch not_nan, not_bitwise, off;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(ref[i])) {
      if (!std::isnan(got[i])) not_nan.add(static_cast<std::int64_t>(i));
      continue;
    }
    if (!same_bits(got[i], zeroed[i])) not_bitwise.add(static_cast<std::int64_t>(i));
    const bool both_neg_inf = std::isinf(ref[i]) && ref[i] < 0 && std::isinf(got[i]) && got[i] < 0;
    if (!both_neg_inf && !(std::fabs(got[i] - ref[i]) <= tol)) off.add(static_cast<std::int64_t>(i));
  }
  const std::string tensor = what;
  CAPTURE(tensor);
  CAPTURE(not_nan.first);
  CAPTURE(not_bitwise.first);
  CAPTURE(off.first);
  CHECK(not_nan.count == 0);
  CHECK(not_bitwise.count == 0);
  CHECK(off.count == 0);
}

std::int64_t count_nan(const std::vector<double>& x) {
  return std::count_if(x.begin(), x.end(), [](double v) { return std::isnan(v); });
}

struct Case {
  const char* name;
  std::int64_t nq, nk, heads, kv, d;
  Mask mask;
  std::int64_t qf, kf;
  std::vector<Bad> bad;
  std::vector<std::int64_t> cuts;  // empty: one fold
};

void check_case(const Case& c, Isa isa, DType dt) {
  Problem p{c.nq, c.nk, c.heads, c.kv, c.d, c.mask, c.qf, c.kf, dt, 31};
  p.make();
  for (const auto& b : c.bad) put(p, b, 0.0f);
  const std::string name = c.name;
  CAPTURE(name);
  CAPTURE(to_string(isa));
  CAPTURE(to_string(dt));
  CAPTURE(c.cuts.size());
  const Result zeroed = run(p, isa, c.cuts);
  for (const auto& b : c.bad) put(p, b, b.value);
  const Result got = run(p, isa, c.cuts);
  std::vector<double> rout, rlse;
  p.reference(rout, rlse);
  check_against(got.out, zeroed.out, rout, dt == DType::f32 ? 2e-5 : 1e-2, "O");
  check_against(got.lse, zeroed.lse, rlse, 2e-5, "lse");
}

std::vector<Case> audit_cases() {
  const auto causal = Mask::causal(), none = Mask::none(), w16 = Mask::sliding_window(16);
  return {
      // V[200] under causal: rows 200.. see it, rows 192..199 share its strip but not the key.
      {"V[200] NaN, causal, GQA", 256, 256, 8, 2, 64, causal, 0, 0, {{'v', 200, 1, 5, kNaN}}, {}},
      {"V[200] NaN, causal, MHA", 256, 256, 4, 4, 64, causal, 0, 0, {{'v', 200, 3, 63, kNaN}}, {}},
      // Window 16: only rows 100..115 see key 100; rows 64..191 used to get inf or NaN.
      {"V[100] inf, window 16, GQA", 256, 256, 8, 2, 64, w16, 0, 0, {{'v', 100, 0, 17, kInf}}, {}},
      {"V[100] -inf, window 16, MHA", 256, 256, 4, 4, 128, w16, 0, 0, {{'v', 100, 2, 0, -kInf}}, {}},
      {"Q NaN, causal, GQA", 256, 256, 8, 2, 64, causal, 0, 0, {{'q', 150, 3, 7, kNaN}}, {}},
      {"Q inf, no mask, MHA", 200, 256, 4, 4, 64, none, 0, 0, {{'q', 7, 1, 40, kInf}}, {}},
      {"K NaN, no mask, GQA", 256, 256, 8, 2, 64, none, 0, 0, {{'k', 60, 1, 9, kNaN}}, {}},
      {"K NaN, causal, MQA", 256, 256, 8, 1, 64, causal, 0, 0, {{'k', 130, 0, 0, kNaN}}, {}},
      {"K inf, causal, GQA", 256, 256, 8, 2, 64, causal, 0, 0, {{'k', 30, 0, 3, kInf}}, {}},
      {"K -inf, window 16, MHA", 256, 256, 4, 4, 64, w16, 0, 0, {{'k', 250, 2, 11, -kInf}}, {}},
      // A NaN query row that sees no key at all stays O = 0, lse = -inf (it is never used).
      {"Q NaN in a fully masked row", 64, 128, 4, 2, 64, causal, 0, 32, {{'q', 5, 0, 0, kNaN}, {'q', 40, 1, 2, kNaN}}, {}},
      // Everything at once, folded in pieces as the ring does: poison from an early piece
      // must survive the later folds into the same state.
      {"all kinds, causal, pieces", 256, 256, 8, 2, 64, causal, 0, 0,
       {{'q', 90, 5, 1, kNaN}, {'k', 20, 0, 2, kInf}, {'v', 140, 1, 33, kNaN}, {'v', 141, 1, 33, -kInf}, {'v', 220, 0, 0, kInf}},
       {64, 130, 200}},
      {"all kinds, window 40, pieces", 256, 256, 8, 8, 64, Mask::sliding_window(40), 0, 0,
       {{'q', 10, 5, 1, kNaN}, {'k', 70, 4, 2, kNaN}, {'v', 150, 1, 60, kInf}},
       {30, 71, 150, 151}},
  };
}

}  // namespace

TEST_CASE("non-finite Q, K, V reach exactly the rows that see them, on every ISA path and dtype") {
  const auto cases = audit_cases();
  for (Isa isa : available_isas())
    for (DType dt : {DType::f32, DType::bf16})
      for (const auto& c : cases) check_case(c, isa, dt);
}

TEST_CASE("the audit's examples, spelled out") {
  // V[200] NaN under causal: rows 192..199 are finite and exact, rows 200..255 NaN in
  // the one element, lse finite everywhere.
  Problem p{256, 256, 8, 2, 64, Mask::causal(), 0, 0, DType::f32, 41};
  p.make();
  put(p, {'v', 200, 1, 5, 0.0f}, kNaN);
  std::vector<double> rout, rlse;
  p.reference(rout, rlse);
  CHECK(count_nan(rlse) == 0);
  CHECK(count_nan(rout) == 56 * 4);  // rows 200..255, heads 4..7 (kv head 1), element 5
  for (Isa isa : available_isas()) {
    CAPTURE(to_string(isa));
    const Result got = run(p, isa, {});
    std::int64_t leaked = 0, poisoned = 0;
    for (std::int64_t i = 0; i < 256; ++i)
      for (std::int64_t h = 0; h < 8; ++h)
        for (std::int64_t e = 0; e < 64; ++e) {
          const float x = got.out[static_cast<std::size_t>((i * 8 + h) * 64 + e)];
          const bool sees = i >= 200 && h >= 4 && e == 5;
          if (sees) poisoned += std::isnan(x);
          else leaked += !std::isfinite(x);
        }
    CHECK(leaked == 0);
    CHECK(poisoned == 56 * 4);
  }

  // Window 16, V[100] inf: only rows 100..115 see key 100.
  Problem w{256, 256, 8, 2, 64, Mask::sliding_window(16), 0, 0, DType::f32, 42};
  w.make();
  put(w, {'v', 100, 0, 17, 0.0f}, kInf);
  for (Isa isa : available_isas()) {
    CAPTURE(to_string(isa));
    const Result got = run(w, isa, {});
    std::int64_t leaked = 0;
    for (std::int64_t i = 64; i < 192; ++i) {
      if (i >= 100 && i < 116) continue;
      for (std::int64_t x = 0; x < 8 * 64; ++x) leaked += !std::isfinite(got.out[static_cast<std::size_t>(i * 8 * 64 + x)]);
    }
    CHECK(leaked == 0);
    for (std::int64_t i = 100; i < 116; ++i)
      for (std::int64_t h = 0; h < 4; ++h) CHECK(std::isnan(got.out[static_cast<std::size_t>((i * 8 + h) * 64 + 17)]));
  }

  // A NaN in Q: that (row, head) is NaN in O and lse, not O = 0 and lse = -inf.
  Problem q{256, 256, 8, 2, 64, Mask::causal(), 0, 0, DType::f32, 43};
  q.make();
  put(q, {'q', 150, 3, 7, 0.0f}, kNaN);
  for (Isa isa : available_isas()) {
    CAPTURE(to_string(isa));
    const Result got = run(q, isa, {});
    CHECK(std::isnan(got.lse[150 * 8 + 3]));
    for (std::int64_t e = 0; e < 64; ++e) CHECK(std::isnan(got.out[static_cast<std::size_t>((150 * 8 + 3) * 64 + e)]));
    CHECK(std::isfinite(got.lse[150 * 8 + 2]));
  }
}

TEST_CASE("keys spanning several 4096-key chunks: poison in either chunk reaches only its rows") {
  const Case c{"two chunks", 64, 4700, 4, 2, 64, Mask::sliding_window(700), 4636, 0,
               {{'k', 3990, 0, 1, kNaN}, {'v', 4500, 1, 2, kInf}, {'k', 100, 1, 0, kNaN}}, {}};
  for (DType dt : {DType::f32, DType::bf16}) check_case(c, default_isa(), dt);
}

TEST_CASE("merge and finalize keep the poison whatever the order") {
  // Hand-made states for one row and head, d = 2: poisoned (what the kernel writes for a
  // row that saw a NaN score), empty, two clean ones, and one with a NaN element of o.
  auto state = [](float m, float l, float o0, float o1) {
    OnlineSoftmaxState s(1, 1, 2);
    s.m = {m};
    s.l = {l};
    s.o = {o0, o1};
    return s;
  };
  const float ninf = -kInf;
  const OnlineSoftmaxState poisoned = state(kNaN, kNaN, kNaN, kNaN);
  const OnlineSoftmaxState empty = state(ninf, 0.0f, 0.0f, 0.0f);
  const OnlineSoftmaxState clean_a = state(0.5f, 2.0f, 1.0f, -1.0f);
  const OnlineSoftmaxState clean_b = state(3.0f, 1.5f, 0.25f, 2.0f);
  const OnlineSoftmaxState half = state(1.0f, 1.0f, kNaN, 0.5f);

  auto finish = [](const OnlineSoftmaxState& s) {
    std::vector<float> out(2), lse(1);
    finalize(s, out.data(), lse.data());
    return std::pair{out, lse[0]};
  };
  // Every order of every subset containing the poisoned state, as a left fold starting
  // from an empty state and as a left fold starting from the first element.
  std::vector<const OnlineSoftmaxState*> all = {&poisoned, &empty, &clean_a, &clean_b, &half};
  for (unsigned subset = 1; subset < 32; ++subset) {
    std::vector<int> idx;
    for (int i = 0; i < 5; ++i)
      if (subset & (1u << i)) idx.push_back(i);
    const bool has_poison = subset & 1u, has_half = subset & 16u;
    const bool has_key = subset & (1u | 4u | 8u | 16u);
    std::sort(idx.begin(), idx.end());
    do {
      for (bool from_empty : {true, false}) {
        OnlineSoftmaxState acc = from_empty ? empty : *all[static_cast<std::size_t>(idx[0])];
        for (std::size_t i = from_empty ? 0 : 1; i < idx.size(); ++i) merge(acc, *all[static_cast<std::size_t>(idx[i])]);
        const auto [out, lse] = finish(acc);
        CAPTURE(subset);
        CAPTURE(from_empty);
        if (has_poison) {
          CHECK(std::isnan(lse));
          CHECK(std::isnan(out[0]));
          CHECK(std::isnan(out[1]));
        } else if (!has_key) {
          CHECK((std::isinf(lse) && lse < 0));
          CHECK(out[0] == 0.0f);
          CHECK(out[1] == 0.0f);
        } else {
          CHECK(std::isfinite(lse));
          CHECK(std::isnan(out[0]) == has_half);
          CHECK(std::isfinite(out[1]));
        }
      }
    } while (std::next_permutation(idx.begin(), idx.end()));
  }
  // An in-place finalize of a poisoned state is NaN too, not O = 0 and lse = -inf.
  OnlineSoftmaxState s = poisoned;
  std::vector<float> lse(1);
  finalize(s, s.o.data(), lse.data());
  CHECK(std::isnan(s.o[0]));
  CHECK(std::isnan(lse[0]));
}

TEST_CASE("partial states folded from poisoned pieces merge to the reference in any order") {
  Problem p{80, 480, 8, 2, 64, Mask::sliding_window(200), 300, 0, DType::f32, 51};
  p.make();
  put(p, {'k', 130, 1, 4, 0.0f}, kNaN);   // piece 2
  put(p, {'v', 350, 0, 9, 0.0f}, kInf);   // piece 5
  put(p, {'q', 33, 6, 0, 0.0f}, -kInf);
  BlockAttention attn(p.config(std::nullopt));
  const std::int64_t pieces = 8, len = p.nk / pieces;
  std::vector<OnlineSoftmaxState> parts;
  for (std::int64_t i = 0; i < pieces; ++i) {
    parts.emplace_back(p.nq, p.heads, p.head_dim);
    attn.fold(p.qp(), p.q_pos(), p.kp(i * len), p.vp(i * len), p.k_pos(i * len, len), parts.back());
  }
  std::vector<double> rout, rlse;
  p.reference(rout, rlse);
  REQUIRE(count_nan(rlse) > 0);
  REQUIRE(count_nan(rout) > count_nan(rlse) * p.head_dim);  // some V-only poison too
  std::vector<int> order(pieces);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 8; ++trial) {
    std::shuffle(order.begin(), order.end(), rng);
    OnlineSoftmaxState acc(p.nq, p.heads, p.head_dim);
    for (int i : order) merge(acc, parts[static_cast<std::size_t>(i)]);
    std::vector<OnlineSoftmaxState> level;
    for (int i : order) level.push_back(parts[static_cast<std::size_t>(i)]);
    while (level.size() > 1) {
      std::vector<OnlineSoftmaxState> next;
      for (std::size_t i = 0; i + 1 < level.size(); i += 2) {
        merge(level[i], level[i + 1]);
        next.push_back(std::move(level[i]));
      }
      if (level.size() % 2) next.push_back(std::move(level.back()));
      level = std::move(next);
    }
    for (auto* s : {&acc, &level[0]}) {
      std::vector<float> out(rout.size()), lse(rlse.size());
      finalize(*s, out.data(), lse.data());
      CAPTURE(trial);
      Mismatch wrong_nan, off;
      for (std::size_t i = 0; i < out.size(); ++i) {
        if (std::isnan(rout[i]) != std::isnan(out[i])) wrong_nan.add(static_cast<std::int64_t>(i));
        else if (!std::isnan(rout[i]) && !(std::fabs(out[i] - rout[i]) <= 2e-5)) off.add(static_cast<std::int64_t>(i));
      }
      for (std::size_t i = 0; i < lse.size(); ++i) {
        if (std::isnan(rlse[i]) != std::isnan(lse[i])) wrong_nan.add(static_cast<std::int64_t>(i));
        else if (!std::isnan(rlse[i]) && !(std::fabs(lse[i] - rlse[i]) <= 2e-5)) off.add(static_cast<std::int64_t>(i));
      }
      CAPTURE(wrong_nan.first);
      CHECK(wrong_nan.count == 0);
      CHECK(off.count == 0);
    }
  }
}
