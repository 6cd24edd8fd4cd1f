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
//
// bf16 weights multiply bf16 activations, as oneDNN's bf16 matmul and llama.cpp's bf16
// dot do: x comes rounded (to nearest even, denormals to zero) and packed in the same word
// pairs (x[i*ldx + p] holds steps 2p and 2p + 1; ldx in words; an odd K's last high half
// zero), and each pair is folded as the AVX512-BF16 dot instruction does it:
//   acc = fma(x[2p+1], w[2p+1][j], acc); acc = fma(x[2p], w[2p][j], acc)
// The products of two bf16 values are exact in fp32, so a plain multiply and add is the
// same and every path gives the same bits (save an accumulator that falls below 2^-126,
// which the instruction flushes to zero). k counts steps: ceil(k / 2) pairs.
//
// f16 (IEEE half) weights are packed as [K][32] halves (a step's 32 columns in 64 bytes)
// and widened in registers (exact), x stays fp32: the f16 loops are the f32 loops with
// the widened weights, so a f16 Linear gives the bits of a f32 Linear holding the same
// (widened) values on the same path. w points at the run's first step's halves.
#pragma once

#include <cstdint>

#include "ringattn/types.hpp"

namespace ringattn::kernels {

inline constexpr int kPanel = 32;  // output columns per packed panel, every path

using LinearPanelF32Fn = void (*)(const float* x, std::int64_t ldx, int m, const float* w, std::int64_t k,
                                  const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add);
using LinearPanelBf16Fn = void (*)(const std::uint32_t* x, std::int64_t ldx, int m, const std::uint32_t* w,
                                   std::int64_t k, const float* a, std::int64_t lda, float* y, std::int64_t ldy,
                                   int cols, bool add);

// Few rows, several panels: the same as `panels` panel calls side by side (panel q's
// weights at w + q * stride words; its columns at q*32 of a and y), for m <= wide_rows and
// full panels only. One row's column of a panel is one dependent chain of multiply-adds, so
// a single panel keeps only 2 (AVX-512) chains a row in flight and waits on the FMA latency;
// four panels keep 8. Null where a path has none.
using LinearPanelF16Fn = void (*)(const float* x, std::int64_t ldx, int m, const std::uint16_t* w, std::int64_t k,
                                  const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add);

using LinearWideF32Fn = void (*)(const float* x, std::int64_t ldx, int m, const float* w, std::int64_t stride,
                                 std::int64_t k, const float* a, std::int64_t lda, float* y, std::int64_t ldy, bool add);
using LinearWideBf16Fn = void (*)(const std::uint32_t* x, std::int64_t ldx, int m, const std::uint32_t* w,
                                  std::int64_t stride, std::int64_t k, const float* a, std::int64_t lda, float* y,
                                  std::int64_t ldy, bool add);

// f16 weights, stride in halves.
using LinearWideF16Fn = void (*)(const float* x, std::int64_t ldx, int m, const std::uint16_t* w, std::int64_t stride,
                                 std::int64_t k, const float* a, std::int64_t lda, float* y, std::int64_t ldy, bool add);

// A packed panel block of a block format (q8_0, q4_k, q6_k: kernels/quant_unpack.hpp) as
// [steps][32] floats, vectorised for the path; the same bits on every path.
using LinearUnpackFn = void (*)(DType d, const std::uint32_t* src, float* out);

// Few rows against a block format's panel: each step's 32 weights unpacked in registers
// (kernels/quant_unpack.hpp's values, bit for bit) straight into the f32 loop's
// multiply-adds, in its order, so the result is the bits of `unpack` then `panel_f32`
// without the floats going through memory (decode's path: a panel's whole K unpacked is up
// to 1 MiB written and read back per row tile). w: the run's first block in the panel; k:
// whole blocks of `d`. m <= quant_rows. panels = 2 (m <= quant_wide_rows, full panels, the
// second at w + stride words, its columns at 32 of a and y) keeps twice the chains in flight.
// Null where a path has none.
using LinearQuantFn = void (*)(DType d, const float* x, std::int64_t ldx, int m, const std::uint32_t* w,
                               std::int64_t stride, int panels, std::int64_t k, const float* a, std::int64_t lda,
                               float* y, std::int64_t ldy, int cols, bool add);

struct LinearOps {
  const char* name;
  int max_rows_f32;   // m per panel call (the register tile's rows), f32 and f16 weights
  int max_rows_bf16;
  LinearPanelF32Fn panel_f32;
  LinearPanelBf16Fn panel_bf16;
  LinearPanelF16Fn panel_f16;
  int wide_rows = 0;    // m <= wide_rows may take the wide calls
  int wide_panels = 0;  // panels per wide call
  LinearWideF32Fn wide_f32 = nullptr;
  LinearWideBf16Fn wide_bf16 = nullptr;
  LinearWideF16Fn wide_f16 = nullptr;
  LinearUnpackFn unpack = nullptr;
  int quant_rows = 0;       // m per panel_quant call
  int quant_wide_rows = 0;  // m <= quant_wide_rows may take two panels a call
  LinearQuantFn panel_quant = nullptr;
};

extern const LinearOps kLinearGeneric;
extern const LinearOps kLinearAvx2;
extern const LinearOps kLinearAvx512;      // bf16 pairs folded with two FMAs (no AVX512-BF16 needed)
extern const LinearOps kLinearAvx512Bf16;  // the same fp32 loops; bf16 pairs by the dot instruction

}  // namespace ringattn::kernels
