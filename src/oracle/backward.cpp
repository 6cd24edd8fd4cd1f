// Dense attention's backward in float64 (backward.hpp): per KV-head group, each query row
// recomputes its probabilities from its own scores and adds its part to dK and dV.
#include "backward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace ringattn::oracle {

namespace {

struct Dense {
  const DenseShape& sh;
  std::int64_t nq, nk, H, KH, G, D;
  double scale;
  std::vector<std::int64_t> qp, kp;
  const std::int32_t *qd, *kd;

  Dense(const DenseShape& s, const Positions& q_pos, const Positions& k_pos, const std::int32_t* q_docs, const std::int32_t* k_docs)
      : sh(s), nq(q_pos.size()), nk(k_pos.size()), H(s.heads), KH(s.kv_heads), G(s.heads / s.kv_heads), D(s.head_dim),
        scale(s.scale > 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim))),
        qp(q_pos.materialize()), kp(k_pos.materialize()), qd(q_docs), kd(k_docs) {}

  bool visible(std::int64_t i, std::int64_t j) const {
    return sh.mask.visible(qp[static_cast<std::size_t>(i)], kp[static_cast<std::size_t>(j)]) && (!qd || qd[i] == kd[j]);
  }
  // Row (i, h): p[j] = its probabilities over every key (0 where hidden); false if it sees none.
  bool probabilities(const double* q, const double* k, std::int64_t i, std::int64_t h, std::vector<double>& p,
                     double* lse_out) const {
    const std::int64_t g = h / G;
    const double* qr = q + (i * H + h) * D;
    double mx = -std::numeric_limits<double>::infinity();
    bool seen = false;
    for (std::int64_t j = 0; j < nk; ++j) {
      p[static_cast<std::size_t>(j)] = -std::numeric_limits<double>::infinity();
      if (!visible(i, j)) continue;
      const double* kr = k + (j * KH + g) * D;
      double dot = 0;
      for (std::int64_t t = 0; t < D; ++t) dot += qr[t] * kr[t];
      p[static_cast<std::size_t>(j)] = dot * scale;
      mx = std::max(mx, dot * scale);
      seen = true;
    }
    if (!seen) {
      std::fill(p.begin(), p.end(), 0.0);
      if (lse_out) *lse_out = -std::numeric_limits<double>::infinity();
      return false;
    }
    double sum = 0;
    for (std::int64_t j = 0; j < nk; ++j)
      if (visible(i, j)) sum += std::exp(p[static_cast<std::size_t>(j)] - mx);
    const double lse = mx + std::log(sum);
    for (std::int64_t j = 0; j < nk; ++j)
      p[static_cast<std::size_t>(j)] = visible(i, j) ? std::exp(p[static_cast<std::size_t>(j)] - lse) : 0.0;
    if (lse_out) *lse_out = lse;
    return true;
  }
};

std::vector<double> widen(const float* x, std::size_t n) { return std::vector<double>(x, x + n); }

}  // namespace

void dense_attention_f64(const DenseShape& shape, const double* q, const Positions& q_pos, const double* k,
                         const double* v, const Positions& k_pos, double* out, double* lse, const std::int32_t* q_docs,
                         const std::int32_t* k_docs) {
  const Dense a(shape, q_pos, k_pos, q_docs, k_docs);
  std::vector<double> p(static_cast<std::size_t>(a.nk));
  for (std::int64_t i = 0; i < a.nq; ++i)
    for (std::int64_t h = 0; h < a.H; ++h) {
      double l = 0;
      a.probabilities(q, k, i, h, p, &l);
      if (lse) lse[i * a.H + h] = l;
      if (!out) continue;
      double* o = out + (i * a.H + h) * a.D;
      std::fill(o, o + a.D, 0.0);
      for (std::int64_t j = 0; j < a.nk; ++j) {
        const double pj = p[static_cast<std::size_t>(j)];
        if (pj == 0) continue;
        const double* vr = v + (j * a.KH + h / a.G) * a.D;
        for (std::int64_t t = 0; t < a.D; ++t) o[t] += pj * vr[t];
      }
    }
}

void dense_attention_backward_f64(const DenseShape& shape, const double* q, const Positions& q_pos, const double* k,
                                  const double* v, const Positions& k_pos, const double* d_o, double* dq, double* dk,
                                  double* dv, const std::int32_t* q_docs, const std::int32_t* k_docs) {
  const Dense a(shape, q_pos, k_pos, q_docs, k_docs);
  const std::int64_t D = a.D;
  std::fill(dq, dq + a.nq * a.H * D, 0.0);
  std::fill(dk, dk + a.nk * a.KH * D, 0.0);
  std::fill(dv, dv + a.nk * a.KH * D, 0.0);
  // Each KV head's group writes only its own dK/dV columns and its heads' dQ rows.
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < a.KH; ++g) {
    std::vector<double> p(static_cast<std::size_t>(a.nk)), o(static_cast<std::size_t>(D));
    for (std::int64_t h = g * a.G; h < (g + 1) * a.G; ++h)
      for (std::int64_t i = 0; i < a.nq; ++i) {
        if (!a.probabilities(q, k, i, h, p, nullptr)) continue;
        const double* qr = q + (i * a.H + h) * D;
        const double* dor = d_o + (i * a.H + h) * D;
        std::fill(o.begin(), o.end(), 0.0);
        for (std::int64_t j = 0; j < a.nk; ++j) {
          const double pj = p[static_cast<std::size_t>(j)];
          if (pj == 0) continue;
          const double* vr = v + (j * a.KH + g) * D;
          for (std::int64_t t = 0; t < D; ++t) o[static_cast<std::size_t>(t)] += pj * vr[t];
        }
        double di = 0;
        for (std::int64_t t = 0; t < D; ++t) di += dor[t] * o[static_cast<std::size_t>(t)];
        double* dqr = dq + (i * a.H + h) * D;
        for (std::int64_t j = 0; j < a.nk; ++j) {
          if (!a.visible(i, j)) continue;
          const double pj = p[static_cast<std::size_t>(j)];
          const double* kr = k + (j * a.KH + g) * D;
          const double* vr = v + (j * a.KH + g) * D;
          double dp = 0;
          for (std::int64_t t = 0; t < D; ++t) dp += dor[t] * vr[t];
          const double ds = pj * (dp - di) * a.scale;
          double* dkr = dk + (j * a.KH + g) * D;
          double* dvr = dv + (j * a.KH + g) * D;
          for (std::int64_t t = 0; t < D; ++t) {
            dqr[t] += ds * kr[t];
            dkr[t] += ds * qr[t];
            dvr[t] += pj * dor[t];
          }
        }
      }
  }
}

void dense_attention_backward_f64(const DenseShape& shape, const float* q, const Positions& q_pos, const float* k,
                                  const float* v, const Positions& k_pos, const float* d_o, double* dq, double* dk,
                                  double* dv, const std::int32_t* q_docs, const std::int32_t* k_docs) {
  const auto nq = static_cast<std::size_t>(q_pos.size()), nk = static_cast<std::size_t>(k_pos.size());
  const auto qw = static_cast<std::size_t>(shape.heads * shape.head_dim), kw = static_cast<std::size_t>(shape.kv_heads * shape.head_dim);
  const std::vector<double> qd = widen(q, nq * qw), kd = widen(k, nk * kw), vd = widen(v, nk * kw), dod = widen(d_o, nq * qw);
  dense_attention_backward_f64(shape, qd.data(), q_pos, kd.data(), vd.data(), k_pos, dod.data(), dq, dk, dv, q_docs, k_docs);
}

}  // namespace ringattn::oracle
