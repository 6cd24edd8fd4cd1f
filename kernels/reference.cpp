#include "kernels/reference.hpp"

#include <cmath>
#include <limits>

namespace ringattn::kernels {

void dense_attention_f64(const DenseShape& sh, const float* q, const Positions& q_pos, const float* k,
                         const float* v, const Positions& k_pos, double* out, double* lse) {
  const std::int64_t nq = q_pos.size(), nk = k_pos.size(), H = sh.heads, D = sh.head_dim;
  const std::int64_t G = sh.heads / sh.kv_heads, KH = sh.kv_heads;
  const double scale = sh.scale > 0 ? sh.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const auto qp = q_pos.materialize(), kp = k_pos.materialize();
  std::vector<double> s(static_cast<std::size_t>(nk));
  std::vector<double> acc(static_cast<std::size_t>(D));
#pragma omp parallel for collapse(2) firstprivate(s, acc) schedule(static)
  for (std::int64_t i = 0; i < nq; ++i) {
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / G;
      const float* qr = q + (i * H + h) * D;
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < nk; ++j) {
        if (!sh.mask.visible(qp[static_cast<std::size_t>(i)], kp[static_cast<std::size_t>(j)])) {
          s[static_cast<std::size_t>(j)] = -std::numeric_limits<double>::infinity();
          continue;
        }
        const float* kr = k + (j * KH + g) * D;
        double dot = 0;
        for (std::int64_t t = 0; t < D; ++t) dot += static_cast<double>(qr[t]) * kr[t];
        s[static_cast<std::size_t>(j)] = dot * scale;
        mx = std::fmax(mx, s[static_cast<std::size_t>(j)]);
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0;
      if (mx != -std::numeric_limits<double>::infinity()) {
        for (std::int64_t j = 0; j < nk; ++j) {
          if (s[static_cast<std::size_t>(j)] == -std::numeric_limits<double>::infinity()) continue;
          const double p = std::exp(s[static_cast<std::size_t>(j)] - mx);
          sum += p;
          const float* vr = v + (j * KH + g) * D;
          for (std::int64_t t = 0; t < D; ++t) acc[static_cast<std::size_t>(t)] += p * vr[t];
        }
      }
      if (out)
        for (std::int64_t t = 0; t < D; ++t)
          out[(i * H + h) * D + t] = sum > 0 ? acc[static_cast<std::size_t>(t)] / sum : 0.0;
      if (lse) lse[i * H + h] = sum > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity();
    }
  }
}

}  // namespace ringattn::kernels
