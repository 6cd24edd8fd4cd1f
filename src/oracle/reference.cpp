// Dense attention in float64, one (query row, head) at a time over its visible keys.
// Non-finite inputs follow the semantics stated in reference.hpp (and block_attention.hpp):
// a non-finite score poisons the whole row, a non-finite value one output element.
#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ringattn::oracle {

void dense_attention_f64(const DenseShape& sh, const float* q, const Positions& q_pos, const float* k,
                         const float* v, const Positions& k_pos, double* out, double* lse, const std::int32_t* q_docs,
                         const std::int32_t* k_docs) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const std::int64_t nq = q_pos.size(), nk = k_pos.size(), H = sh.heads, D = sh.head_dim;
  const std::int64_t G = sh.heads / sh.kv_heads, KH = sh.kv_heads;
  const double scale = sh.scale > 0 ? sh.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const auto qp = q_pos.materialize(), kp = k_pos.materialize();
  std::vector<double> s(static_cast<std::size_t>(nk));
  std::vector<double> acc(static_cast<std::size_t>(D));
  auto visible = [&](std::int64_t i, std::int64_t j) {
    return sh.mask.visible(qp[static_cast<std::size_t>(i)], kp[static_cast<std::size_t>(j)]) &&
           (!q_docs || q_docs[i] == k_docs[j]);
  };
#pragma omp parallel for collapse(2) firstprivate(s, acc) schedule(static)
  for (std::int64_t i = 0; i < nq; ++i) {
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / G;
      const float* qr = q + (i * H + h) * D;
      double mx = kNegInf;
      bool seen = false, poisoned = false;
      for (std::int64_t j = 0; j < nk; ++j) {
        s[static_cast<std::size_t>(j)] = kNegInf;  // hidden: weight exactly 0, value never read
        if (!visible(i, j)) continue;
        const float* kr = k + (j * KH + g) * D;
        double dot = 0;
        for (std::int64_t t = 0; t < D; ++t) dot += static_cast<double>(qr[t]) * kr[t];
        seen = true;
        // In float64 a dot product of finite floats cannot overflow, so a non-finite
        // score means a non-finite q or k entry. NaN, +inf and -inf alike poison the row
        // (std::fmax would silently skip a NaN).
        if (!std::isfinite(dot)) {
          poisoned = true;
          continue;
        }
        s[static_cast<std::size_t>(j)] = dot * scale;
        mx = std::max(mx, s[static_cast<std::size_t>(j)]);
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0;
      if (seen && !poisoned) {
        for (std::int64_t j = 0; j < nk; ++j) {
          if (!visible(i, j)) continue;
          const double p = std::exp(s[static_cast<std::size_t>(j)] - mx);
          sum += p;
          const float* vr = v + (j * KH + g) * D;
          // A non-finite value poisons its element whatever its weight (IEEE: 0 * inf
          // is NaN); +inf with a positive weight gives NaN too, not +inf, so the
          // answer does not hinge on whether a weight underflowed.
          for (std::int64_t t = 0; t < D; ++t)
            acc[static_cast<std::size_t>(t)] += std::isfinite(vr[t]) ? p * vr[t] : kNaN;
        }
      }
      if (out)
        for (std::int64_t t = 0; t < D; ++t)
          out[(i * H + h) * D + t] = poisoned ? kNaN : seen ? acc[static_cast<std::size_t>(t)] / sum : 0.0;
      if (lse) lse[i * H + h] = poisoned ? kNaN : seen ? mx + std::log(sum) : kNegInf;
    }
  }
}

}  // namespace ringattn::oracle
