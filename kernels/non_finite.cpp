// NaN and inf in a fold's inputs: the scrub, the bookkeeping of where they were, and
// the poisoning of the rows that see them. The why is in non_finite.hpp.
#include "kernels/non_finite.hpp"

#include <algorithm>
#include <limits>

#include "kernels/visible_range.hpp"

namespace ringattn::kernels {

namespace {

template <class T>
void zero_non_finite_t(T* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    if (non_finite_bit(x[i]) & kNonFiniteBit) x[i] = T{0};
}

template <class T>
void count_bad(const T* k, const T* v, std::int64_t rows, std::int64_t kv_heads, std::int64_t dim,
               std::vector<std::int32_t>* k_prefix, std::vector<std::int32_t>* v_prefix) {
  const std::int64_t width = kv_heads * dim;
  if (k_prefix) {
    k_prefix->assign(static_cast<std::size_t>((rows + 1) * kv_heads), 0);
    for (std::int64_t j = 0; j < rows; ++j)
      for (std::int64_t g = 0; g < kv_heads; ++g) {
        std::uint32_t bits = 0;
        const T* row = k + j * width + g * dim;
        for (std::int64_t e = 0; e < dim; ++e) bits |= non_finite_bit(row[e]);
        (*k_prefix)[static_cast<std::size_t>((j + 1) * kv_heads + g)] =
            (*k_prefix)[static_cast<std::size_t>(j * kv_heads + g)] + ((bits & kNonFiniteBit) ? 1 : 0);
      }
  }
  if (v_prefix) {
    v_prefix->assign(static_cast<std::size_t>((rows + 1) * width), 0);
    for (std::int64_t j = 0; j < rows; ++j) {
      const std::int32_t* before = v_prefix->data() + j * width;
      std::int32_t* after = v_prefix->data() + (j + 1) * width;
      for (std::int64_t x = 0; x < width; ++x)
        after[x] = before[x] + ((non_finite_bit(v[j * width + x]) & kNonFiniteBit) ? 1 : 0);
    }
  }
}

}  // namespace

void zero_non_finite(void* x, std::int64_t n, DType dt) {
  if (dt == DType::bf16) zero_non_finite_t(static_cast<std::uint16_t*>(x), n);
  else zero_non_finite_t(static_cast<float*>(x), n);
}

BadKeys::BadKeys(const void* k, bool k_bad, const void* v, bool v_bad, std::int64_t rows, std::int64_t kv_heads,
                 std::int64_t dim, DType dt)
    : kv_heads_(kv_heads), dim_(dim) {
  auto* kp = k_bad ? &k_ : nullptr;
  auto* vp = v_bad ? &v_ : nullptr;
  if (dt == DType::bf16)
    count_bad(static_cast<const std::uint16_t*>(k), static_cast<const std::uint16_t*>(v), rows, kv_heads, dim, kp, vp);
  else
    count_bad(static_cast<const float*>(k), static_cast<const float*>(v), rows, kv_heads, dim, kp, vp);
}

void poison_non_finite(const Mask& mask, const std::vector<std::int64_t>& qpos, const std::uint8_t* q_bad,
                       const std::int64_t* kpos, std::int64_t nk, const BadKeys* keys, std::int64_t group,
                       OnlineSoftmaxState& state, const std::int32_t* qdocs, const std::int32_t* kdocs) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  const std::int64_t nq = static_cast<std::int64_t>(qpos.size()), H = state.heads, D = state.head_dim;
  for (std::int64_t i = 0; i < nq; ++i) {
    std::int64_t lo, hi;
    visible_range(mask, qpos[static_cast<std::size_t>(i)], qdocs ? qdocs[i] : 0, kpos, kdocs, nk, &lo, &hi);
    if (lo == hi) continue;
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / group;
      const auto r = static_cast<std::size_t>(i * H + h);
      float* o = state.o.data() + (i * H + h) * D;
      if ((q_bad && q_bad[r]) || (keys && keys->any_k(lo, hi, g))) {
        state.m[r] = kNaN;
        state.l[r] = kNaN;
        std::fill(o, o + D, kNaN);
        continue;
      }
      if (keys && keys->has_v())
        for (std::int64_t e = 0; e < D; ++e)
          if (keys->any_v(lo, hi, g, e)) o[e] = kNaN;
    }
  }
}

}  // namespace ringattn::kernels
