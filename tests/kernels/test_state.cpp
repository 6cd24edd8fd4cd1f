// merge() of partial states: associative and commutative within fp32 rounding, and
// the empty state is its identity.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "attention_fixture.hpp"
#include "ringattn/error.hpp"

using namespace ringattn;
using fixture::Problem;

TEST_CASE("merging partial states in any order agrees with the dense reference") {
  Problem p{80, 480, 8, 2, 64, Mask::sliding_window(200), 300, 0, DType::f32, 21};
  p.make();
  BlockAttention attn(p.config(std::nullopt));
  const std::int64_t pieces = 8, len = p.nk / pieces;
  std::vector<OnlineSoftmaxState> parts;
  for (std::int64_t i = 0; i < pieces; ++i) {
    parts.emplace_back(p.nq, p.heads, p.head_dim);
    attn.fold(p.qp(), p.q_pos(), p.kp(i * len), p.vp(i * len), p.k_pos(i * len, len), parts.back());
  }
  std::vector<double> rout, rlse;
  p.reference(rout, rlse);
  std::vector<int> order(pieces);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 6; ++trial) {
    std::shuffle(order.begin(), order.end(), rng);
    // Left fold in a shuffled order, and a tree reduction in the same order.
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
      auto e = fixture::compare(out, lse, rout, rlse);
      CHECK_FALSE(e.nan);
      CHECK(e.out <= 2e-5);
      CHECK(e.lse <= 2e-5);
    }
  }
}

TEST_CASE("the empty state is the identity of merge, and shapes must agree") {
  Problem p{20, 50, 8, 8, 64, Mask::none(), 0, 0, DType::f32, 22};
  p.make();
  BlockAttention attn(p.config(std::nullopt));
  OnlineSoftmaxState s(20, 8, 64), empty(20, 8, 64);
  attn.fold(p.qp(), p.q_pos(), p.kp(0), p.vp(0), p.k_pos(0, 50), s);
  OnlineSoftmaxState a = s, b = empty;
  merge(a, empty);
  merge(b, s);
  CHECK(a.o == s.o);
  CHECK(a.m == s.m);
  CHECK(b.o == s.o);
  CHECK(b.l == s.l);
  OnlineSoftmaxState other(21, 8, 64);
  CHECK_THROWS_WITH_AS(merge(a, other), doctest::Contains("differ in shape"), InvalidArgument);
}
