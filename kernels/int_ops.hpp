// ringattn kernels — GGUF's block formats (q8_0, q4_k, q6_k) multiplied in integers: the
// activations quantized to 8 bits on the format's block grid, the dot products summed
// exactly in int32, the scales applied in fp32 once a block in a fixed order. One table per
// ISA path; every path gives the same bits (the integer sums are exact and every fp32 step
// is the same operation in the same order: no fused multiply-add, no reassociation).
//
// Activations (quantize): row r of x, block b of the format's grid (q8_0: 32 values; q4_k,
// q6_k: 256) of values v:
//   amax = max |v|;  dx = amax / 127;  q = round_to_nearest_even(v / dx), at most 127 in size
//   (amax 0: dx = 0, q = 0; a NaN or infinite v: dx = NaN, q = 0, so the row's outputs are NaN)
// and the block's integer side sums (extra words): q8_0: -128 * sum(q) (one int32);
// q4_k: the eight 32-value sums in pairs, (sum_2p & 0xFFFF) | sum_2p+1 << 16 (4 words);
// q6_k: the sixteen 16-value sums in pairs (8 words).
//
// Weights (unpack): a packed panel block (kernels/quant_blocks.hpp) as an IntBlock below,
// every weight an unsigned code u (q8_0: q + 128; q4_k: q, 0..15; q6_k: q, 0..63) in groups
// of 4 steps: codes[g][c][i] = u at step 4g + i, column c — what vpdpbusd, vpmaddubsw and
// sdot multiply against 4 activation bytes at once.
//
// One block's contribution to y[r][c], exact integers first:
//   dot_j = sum over sub-block j's steps of u * q           (q4_k: 32 steps, q6_k: 16, q8_0: all 32)
//   q8_0:  S = dot + extra                                T = float(S) * d[c]
//   q4_k:  S1 = sum_j sc[j][c] * dot_j,  S2 = sum_j m[j][c] * bsum_j
//          T = float(S1) * d[c] - float(S2) * dmin[c]
//   q6_k:  S = sum_j sc[j][c] * dot_j + sum_j (-32 sc[j][c]) * bsum_j     T = float(S) * d[c]
//   acc = acc + T * dx[b]                                  (blocks in order along k)
// |S| < 2^31 for every format (q6_k, the largest: 16 * 16 * 63 * 127 * 128 < 2^28).
// acc starts at a carried sum (a: exact, as the f32 loops carry theirs) or 0, so a K split
// into runs on block boundaries gives the same bits, and a row's result never depends on
// the rows beside it.
#pragma once

#include <cstdint>

#include "ringattn/types.hpp"

namespace ringattn::kernels {

// The integer layout of one format: its block grid, sub-blocks and words.
struct IntFormat {
  DType dtype;
  int block;        // values a block along a row (the activation grid)
  int sub;          // steps per sub-block with its own integer scale (block: none)
  int extra;        // int32 words of activation side sums per block (q8_0 1, q4_k 4, q6_k 8)
  int block_words;  // words of one IntBlock (32 columns)
  // Word offsets inside an IntBlock: codes (block * 8 words), d[32], dmin[32] (q4_k),
  // sc int32 [block / sub][32] (k-quants), coef int16 pairs [extra][32] (k-quants).
  int d_at, dmin_at, sc_at, coef_at;
};

// The integer layout of a block format; null for others.
const IntFormat* int_format(DType d) noexcept;

// Rows of x quantized for one format (quantize's output), row r at:
//   q + r * ldq (int8, in values), dx + r * ldd (fp32, in / block), extra + r * lde (int32).
struct IntRows {
  std::int8_t* q;
  float* dx;
  std::int32_t* extra;
  std::int64_t ldq, ldd, lde;
};
struct IntRowsView {
  const std::int8_t* q;
  const float* dx;
  const std::int32_t* extra;
  std::int64_t ldq, ldd, lde;
};

// rows rows of x (in values each, in whole blocks of the format) quantized into out.
using IntQuantizeFn = void (*)(const IntFormat& f, const float* x, std::int64_t ldx, std::int64_t rows,
                               std::int64_t in, const IntRows& out);
// A packed panel block of f's format as an IntBlock of f.block_words words.
using IntUnpackFn = void (*)(const IntFormat& f, const std::uint32_t* src, std::uint32_t* dst);
// m rows (1..rows of the table) against one panel's run of `blocks` IntBlocks back to back
// at w; x: the run's first block of row 0 (its q, dx and extra at the run's offsets).
// acc as above from a (lda) or 0, then y[i*ldy + j] = acc (store) or y + acc (add), j < cols.
using IntTileFn = void (*)(const IntFormat& f, const IntRowsView& x, int m, const std::uint32_t* w,
                           std::int64_t blocks, const float* a, std::int64_t lda, float* y, std::int64_t ldy,
                           int cols, bool add);

// The tile straight from packed panel blocks (kernels/quant_blocks.hpp), `stride` words
// apart (the format's panel words): no IntBlock written. The same bits as unpack then tile.
using IntPackedTileFn = void (*)(const IntFormat& f, const IntRowsView& x, int m, const std::uint32_t* w,
                                 std::int64_t stride, std::int64_t blocks, const float* a, std::int64_t lda, float* y,
                                 std::int64_t ldy, int cols, bool add);

struct IntOps {
  const char* name;
  int rows;  // m per tile call
  IntQuantizeFn quantize;
  IntUnpackFn unpack;
  IntTileFn tile;
  IntPackedTileFn packed = nullptr;  // where the path reads packed blocks in registers
};

extern const IntOps kIntGeneric;
extern const IntOps kIntAvx2;
extern const IntOps kIntAvx512;      // the portable loops, vectorised for AVX-512
extern const IntOps kIntAvx512Vnni;  // vpdpbusd / vpdpwssd tiles
extern const IntOps kIntAvx512VnniVbmi;  // the same, reading packed blocks with byte permutes
extern const IntOps kIntNeon;        // the portable loops, vectorised for NEON

}  // namespace ringattn::kernels
