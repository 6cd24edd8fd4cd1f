// ringattn kernels — the K/V panels of a block-attention fold (block_attention.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>

namespace ringattn::kernels {

// K and V of the visiting block, repacked once per fold into dense per-(kv head, key
// tile) panels: K^T as [head_dim x tk] and V as [tk x head_dim], plus K as dense rows
// [tk x head_dim] for the strips of partially masked tiles (a column range of the K^T
// panel would not be dense; a row range of K is, read as a transposed operand). oneDNN 2.6 only takes
// its brgemm (and AMX) matmuls for dense operands; on the strided [rows, heads, dim]
// views it falls back to a generic GEMM that is 1.5-3x slower. The copy is O(b d),
// the matmuls it speeds up O(b^2 d). The copied rows are also checked for NaN and inf
// (see kernels/non_finite.hpp): the result says whether K and V hold any.
struct KvFinite {
  bool k, v;
};

// One element of a packed panel: a copy, or bf16 widened to fp32 (a 16-bit shift: exact)
// when a bf16 call multiplies fp32 operands.
template <class D, class S>
inline D panel_element(S x) {
  if constexpr (std::is_same_v<D, S>)
    return x;
  else
    return std::bit_cast<float>(static_cast<std::uint32_t>(x) << 16);
}

// Dense rows [tk x d] into a panel [d x tk], in 16-row strips: 16 rows just written stay
// in L1 while each of the d destination rows receives 16 contiguous elements.
template <class D>
inline void transpose_to_panel(const D* rows, D* panel, std::int64_t tk, std::int64_t d) {
  for (std::int64_t j0 = 0; j0 < tk; j0 += 16) {
    const std::int64_t jn = std::min<std::int64_t>(16, tk - j0);
    const D* strip = rows + j0 * d;
    for (std::int64_t x = 0; x < d; ++x) {
      D* dst = panel + x * tk + j0;
      for (std::int64_t jj = 0; jj < jn; ++jj) dst[jj] = strip[jj * d + x];
    }
  }
}

// S: the caller's element type (fp32 or bf16); D: the matmuls' (the same, or fp32).
template <class D, class S>
KvFinite pack_kv(const S* k, const S* v, D* kt, D* kr, D* vp, std::int64_t nk, std::int64_t kv_heads, std::int64_t d,
                 std::int64_t tile, int threads, bool (*has_non_finite)(const D*, std::int64_t)) {
  const std::int64_t ntiles = (nk + tile - 1) / tile;
  int k_bad = 0, v_bad = 0;
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads) reduction(| : k_bad, v_bad)
  for (std::int64_t g = 0; g < kv_heads; ++g)
    for (std::int64_t t = 0; t < ntiles; ++t) {
      const std::int64_t c0 = t * tile, tk = std::min(tile, nk - c0);
      D* ktile = kt + (g * nk + c0) * d;
      D* vtile = vp + (g * nk + c0) * d;
      D* krows = kr + (g * nk + c0) * d;
      for (std::int64_t j = 0; j < tk; ++j) {
        const S* vrow = v + ((c0 + j) * kv_heads + g) * d;
        const S* krow = k + ((c0 + j) * kv_heads + g) * d;
        std::transform(vrow, vrow + d, vtile + j * d, panel_element<D, S>);
        std::transform(krow, krow + d, krows + j * d, panel_element<D, S>);
      }
      // Checked where they landed: dense and still in cache. (Checking inside the copy
      // loop measured slower than memcpy on these strided rows.) Widening keeps NaN and
      // inf, so the fp32 panels of a bf16 block are checked as fp32.
      v_bad |= has_non_finite(vtile, tk * d);
      k_bad |= has_non_finite(krows, tk * d);
      transpose_to_panel(krows, ktile, tk, d);
    }
  return {!k_bad, !v_bad};
}

}  // namespace ringattn::kernels
