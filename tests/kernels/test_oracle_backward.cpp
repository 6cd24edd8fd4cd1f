// The float64 backward oracle (src/oracle/backward.hpp) checked on its own: its gradients
// against central finite differences of its float64 forward, on tiny shapes, for every
// mask, GQA, documents and a fully masked row; its forward against reference.hpp's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "src/oracle/backward.hpp"
#include "src/oracle/reference.hpp"

namespace ringattn::oracle {
namespace {

std::vector<double> normal(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> x(n);
  for (double& v : x) v = d(rng);
  return x;
}

struct Case {
  const char* name;
  DenseShape shape;
  std::int64_t nq, nk, q_first;  // queries at q_first.., keys at 0..
  bool documents;
};

// L = Σ dO ∘ O: its gradient is the backward of dO.
double loss(const Case& c, const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
            const std::vector<double>& d_o, const std::int32_t* qd, const std::int32_t* kd) {
  std::vector<double> o(d_o.size());
  dense_attention_f64(c.shape, q.data(), Positions::contiguous(c.q_first, c.nq), k.data(), v.data(),
                      Positions::contiguous(0, c.nk), o.data(), nullptr, qd, kd);
  double s = 0;
  for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * d_o[i];
  return s;
}

}  // namespace

TEST_CASE("oracle backward: gradients equal central finite differences of the float64 forward") {
  const Case cases[] = {
      {"none, MHA", {2, 2, 3, Mask::none(), 0}, 5, 6, 0, false},
      {"causal, GQA 4:2", {4, 2, 3, Mask::causal(), 0}, 6, 6, 0, false},
      {"causal, queries after the keys' start, GQA 3:1", {3, 1, 4, Mask::causal(), 0}, 4, 7, 3, false},
      {"window 2, GQA 2:1, scale 0.7", {2, 1, 3, Mask::sliding_window(2), 0.7}, 6, 6, 0, false},
      {"causal, two documents", {2, 1, 3, Mask::causal(), 0}, 6, 6, 0, true},
  };
  for (const Case& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const DenseShape& s = c.shape;
    std::vector<double> q = normal(static_cast<std::size_t>(c.nq * s.heads * s.head_dim), 1),
                        k = normal(static_cast<std::size_t>(c.nk * s.kv_heads * s.head_dim), 2),
                        v = normal(static_cast<std::size_t>(c.nk * s.kv_heads * s.head_dim), 3),
                        d_o = normal(static_cast<std::size_t>(c.nq * s.heads * s.head_dim), 4);
    std::vector<std::int32_t> qd, kd;
    for (std::int64_t i = 0; i < c.nq; ++i) qd.push_back(c.q_first + i < 3 ? 0 : 1);
    for (std::int64_t j = 0; j < c.nk; ++j) kd.push_back(j < 3 ? 0 : 1);
    const std::int32_t* qdp = c.documents ? qd.data() : nullptr;
    const std::int32_t* kdp = c.documents ? kd.data() : nullptr;
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    dense_attention_backward_f64(s, q.data(), Positions::contiguous(c.q_first, c.nq), k.data(), v.data(),
                                 Positions::contiguous(0, c.nk), d_o.data(), dq.data(), dk.data(), dv.data(), qdp, kdp);
    double worst = 0, largest = 0;
    auto check = [&](std::vector<double>& x, const std::vector<double>& grad) {
      for (std::size_t e = 0; e < x.size(); ++e) {
        const double h = 1e-5, keep = x[e];
        x[e] = keep + h;
        const double up = loss(c, q, k, v, d_o, qdp, kdp);
        x[e] = keep - h;
        const double down = loss(c, q, k, v, d_o, qdp, kdp);
        x[e] = keep;
        worst = std::max(worst, std::abs((up - down) / (2 * h) - grad[e]));
        largest = std::max(largest, std::abs(grad[e]));
      }
    };
    check(q, dq);
    check(k, dk);
    check(v, dv);
    MESSAGE(name << ": max |finite difference - gradient| " << worst << " (largest gradient " << largest << ")");
    CHECK(worst < 1e-7);
    CHECK(largest > 0.1);  // not trivially zero
  }
}

TEST_CASE("oracle backward: a row that sees no key gets zero gradients and gives none; fp32 inputs widen exactly") {
  // Causal, queries at 0.. and keys at 2..: rows 0 and 1 see nothing.
  const DenseShape s{2, 1, 4, Mask::causal(), 0};
  const std::int64_t nq = 4, nk = 3;
  std::vector<double> q = normal(nq * 2 * 4, 5), k = normal(nk * 4, 6), v = normal(nk * 4, 7), d_o = normal(nq * 2 * 4, 8);
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  dense_attention_backward_f64(s, q.data(), Positions::contiguous(0, nq), k.data(), v.data(), Positions::contiguous(2, nk),
                               d_o.data(), dq.data(), dk.data(), dv.data());
  for (std::size_t e = 0; e < 2 * 2 * 4; ++e) CHECK(dq[e] == 0.0);
  for (double x : dq) CHECK(std::isfinite(x));
  // Hiding rows 0 and 1 changes nothing: they gave dK/dV nothing.
  std::vector<double> dq2(2 * 2 * 4), dk2(k.size()), dv2(v.size());
  dense_attention_backward_f64(s, q.data() + 2 * 2 * 4, Positions::contiguous(2, 2), k.data(), v.data(), Positions::contiguous(2, nk),
                               d_o.data() + 2 * 2 * 4, dq2.data(), dk2.data(), dv2.data());
  for (std::size_t e = 0; e < dk.size(); ++e) {
    CHECK(dk[e] == doctest::Approx(dk2[e]).epsilon(1e-13));
    CHECK(dv[e] == doctest::Approx(dv2[e]).epsilon(1e-13));
  }

  // The float overload and the float64 forward agree with reference.hpp on fp32 data.
  std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end()), dof(d_o.begin(), d_o.end());
  std::vector<double> qw(qf.begin(), qf.end()), kw(kf.begin(), kf.end()), vw(vf.begin(), vf.end()), dow(dof.begin(), dof.end());
  std::vector<double> a(dq.size()), b(dq.size()), ka(dk.size()), kb(dk.size()), va(dv.size()), vb(dv.size());
  dense_attention_backward_f64(s, qf.data(), Positions::contiguous(0, nq), kf.data(), vf.data(), Positions::contiguous(0, nk),
                               dof.data(), a.data(), ka.data(), va.data());
  dense_attention_backward_f64(s, qw.data(), Positions::contiguous(0, nq), kw.data(), vw.data(), Positions::contiguous(0, nk),
                               dow.data(), b.data(), kb.data(), vb.data());
  CHECK(a == b);
  CHECK(ka == kb);
  CHECK(va == vb);
  std::vector<double> o1(q.size()), o2(q.size()), l1(nq * 2), l2(nq * 2);
  dense_attention_f64(s, qf.data(), Positions::contiguous(0, nq), kf.data(), vf.data(), Positions::contiguous(0, nk), o1.data(), l1.data());
  dense_attention_f64(s, qw.data(), Positions::contiguous(0, nq), kw.data(), vw.data(), Positions::contiguous(0, nk), o2.data(), l2.data());
  for (std::size_t e = 0; e < o1.size(); ++e) CHECK(o1[e] == doctest::Approx(o2[e]).epsilon(1e-13));
  for (std::size_t e = 0; e < l1.size(); ++e) CHECK(l1[e] == doctest::Approx(l2[e]).epsilon(1e-13));
}

}  // namespace ringattn::oracle
