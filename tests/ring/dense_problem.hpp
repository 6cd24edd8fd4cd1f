// The ring tests' problem: one attention over the whole sequence with its float64 dense
// answer (src/oracle/reference.hpp), each rank's rows of it, and a call's error against it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "ringattn/ring.hpp"
#include "src/oracle/random_inputs.hpp"
#include "src/oracle/reference.hpp"

namespace ringattn::test {

// One problem over the whole sequence, and each rank's rows of it.
struct Problem {
  std::int64_t tokens, heads, kv_heads, head_dim;
  AttentionSpec spec;
  std::vector<float> q, k, v;
  std::vector<double> ref_o, ref_lse;

  Problem(std::int64_t n, std::int64_t h, std::int64_t kvh, std::int64_t d, Mask mask, DType dtype, unsigned seed)
      : tokens(n), heads(h), kv_heads(kvh), head_dim(d) {
    spec = {h, kvh, d, dtype, mask, 0};
    q = oracle::random_normal(static_cast<std::size_t>(n * h * d), seed);
    k = oracle::random_normal(static_cast<std::size_t>(n * kvh * d), seed + 1);
    v = oracle::random_normal(static_cast<std::size_t>(n * kvh * d), seed + 2);
    if (dtype == DType::bf16) {  // the reference sees what the ring sees
      oracle::round_to_bf16(q);
      oracle::round_to_bf16(k);
      oracle::round_to_bf16(v);
    }
    ref_o.resize(q.size());
    ref_lse.resize(static_cast<std::size_t>(n * h));
    const auto all = Positions::contiguous(0, n);
    oracle::dense_attention_f64({h, kvh, d, mask, 0.0}, q.data(), all, k.data(), v.data(), all, ref_o.data(),
                                ref_lse.data());
  }

  // The rows at `pos` of a [tokens, width] tensor.
  static std::vector<float> rows(const std::vector<float>& t, const std::vector<std::int64_t>& pos, std::int64_t width) {
    std::vector<float> out;
    for (auto p : pos) out.insert(out.end(), t.begin() + p * width, t.begin() + (p + 1) * width);
    return out;
  }

  // Calls forward by `schedule` for these rows and returns max |O - ref| and max |lse - ref|.
  std::pair<double, double> run(Ring& ring, const std::vector<std::int64_t>& pos, Schedule schedule = Schedule::ring) const {
    const auto qr = rows(q, pos, heads * head_dim), kr = rows(k, pos, kv_heads * head_dim),
               vr = rows(v, pos, kv_heads * head_dim);
    std::vector<float> o(qr.size()), lse(pos.size() * static_cast<std::size_t>(heads));
    ring.forward({spec, qr, kr, vr, pos, {}, schedule}, o, lse);
    double eo = 0, el = 0;
    for (std::size_t i = 0; i < pos.size(); ++i)
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::size_t g = static_cast<std::size_t>(pos[i] * heads + h), l = i * static_cast<std::size_t>(heads) + static_cast<std::size_t>(h);
        if (!(std::isinf(ref_lse[g]) && std::isinf(lse[l]))) el = std::max(el, std::fabs(lse[l] - ref_lse[g]));
        for (std::int64_t d = 0; d < head_dim; ++d)
          eo = std::max(eo, std::fabs(o[l * static_cast<std::size_t>(head_dim) + static_cast<std::size_t>(d)] -
                                      ref_o[g * static_cast<std::size_t>(head_dim) + static_cast<std::size_t>(d)]));
      }
    return {eo, el};
  }
};

inline double tolerance(const Problem& p) { return p.spec.dtype == DType::bf16 ? 1e-2 : 2e-5; }

}  // namespace ringattn::test
