// ringattn kernels — the inner loop of a weight matmul (a model's projections), one
// table per ISA path.
//
// The weights are packed once (kernels/linear.cpp) into panels of kPanel = 32 output
// columns, each panel k-major: fp32 as [K][32] floats; bf16 as [ceil(K/2)][32] uint32
// words whose low half is column j's weight at k = 2i and high half the one at 2i + 1 (so
// widening is one shift or one AND, and a bf16 weight is never stored wider than it came).
// The layout is the same on every path, so the packed bytes do not depend on the CPU.
//
// A panel call computes m (1..max_rows) rows of one panel over a run of k steps:
//   acc[i][j] = a[i*lda + j] (a non-null: a sum carried over from earlier steps) or 0,
//   then for each step s = 0, 1, ..., k-1 in that order acc += x[i*ldx + s] * w[s][j]
// one fused (or, generic, separate) multiply-add per step into one accumulator per
// element, then y[i*ldy + j] = acc (store) or y + acc (add) for j < cols (<= 32). a may
// be y. A long K runs as several calls, each carrying the last one's sums (stored, then
// loaded: exact), so every element is one chain over k = 0..K-1 whatever the split, the
// rows m, the panel's neighbours or the thread: a row's result does not depend on the
// rows beside it (batch invariance, by construction). w points at the run's first step
// (f32: step s's row; bf16: the word pair holding it, s even); x at its first element.
#pragma once

#include <cstdint>

namespace ringattn::kernels {

inline constexpr int kPanel = 32;  // output columns per packed panel, every path

using LinearPanelF32Fn = void (*)(const float* x, std::int64_t ldx, int m, const float* w, std::int64_t k,
                                  const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add);
using LinearPanelBf16Fn = void (*)(const float* x, std::int64_t ldx, int m, const std::uint32_t* w, std::int64_t k,
                                   const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add);

// Few rows, several panels: the same as `panels` panel calls side by side (panel q's
// weights at w + q * stride words; its columns at q*32 of a and y), for m <= wide_rows and
// full panels only. One row's column of a panel is one dependent chain of multiply-adds, so
// a single panel keeps only 2 (AVX-512) chains a row in flight and waits on the FMA latency;
// four panels keep 8. Null where a path has none.
using LinearWideFn = void (*)(const float* x, std::int64_t ldx, int m, const void* w, std::int64_t stride,
                              std::int64_t k, const float* a, std::int64_t lda, float* y, std::int64_t ldy, bool add);

struct LinearOps {
  const char* name;
  int max_rows_f32;   // m per panel call (the register tile's rows)
  int max_rows_bf16;
  LinearPanelF32Fn panel_f32;
  LinearPanelBf16Fn panel_bf16;
  int wide_rows = 0;    // m <= wide_rows may take the wide calls
  int wide_panels = 0;  // panels per wide call
  LinearWideFn wide_f32 = nullptr;
  LinearWideFn wide_bf16 = nullptr;
};

extern const LinearOps kLinearGeneric;
extern const LinearOps kLinearAvx2;
extern const LinearOps kLinearAvx512;

}  // namespace ringattn::kernels
