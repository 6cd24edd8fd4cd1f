// ringattn kernels — GGUF's quantized block formats (llama.cpp's ggml-common.h), as a file
// holds them along a weight row and as ringattn::Linear packs them into its panels of 32
// output columns. The values are llama.cpp's dequantize_row_* to the bit; nothing here
// rounds a stored value.
//
//   q8_0: 32 values a block, 34 bytes: fp16 d, int8 q[32];   value = d * q
//   q4_k: 256 values, 144 bytes: fp16 d, fp16 dmin, 12 bytes of eight 6-bit (scale, min)
//         pairs (one a sub-block of 32), 128 bytes of 4-bit q;
//         value = (d * scale) * q - dmin * min
//   q6_k: 256 values, 210 bytes: 128 bytes of q's low 4 bits, 64 of its high 2 bits, int8
//         scales[16] (one a sub-block of 16), fp16 d;  value = (d * scale) * (q - 32)
//
// A packed panel block holds the same numbers for 32 columns, step-major so a run of steps
// unpacks to the [steps][32] floats the fp32 panel loops read:
//   q8_0: d[32] (fp32) | q int8 [32 steps][32]                                  288 words
//   q4_k: d[32], dmin[32] (fp32) | scale u8 [8][32] | min u8 [8][32] |
//         q nibbles [256 steps][16 bytes] (byte c of a step: column c low, c + 16 high) 1216 words
//   q6_k: d[32] (fp32) | scale int8 [16][32] | low nibbles as q4_k's |
//         high 2 bits [256 steps][8 bytes] (byte c: columns c, c+8, c+16, c+24 from bit 0) 1696 words
#pragma once

#include <cstddef>
#include <cstdint>

#include "ringattn/types.hpp"

namespace ringattn::kernels {

struct QuantFormat {
  DType dtype;
  int block;        // values a block, along a row
  int bytes;        // a block's bytes in a file
  int panel_words;  // a block's 4-byte words in a packed panel (32 columns)
};

// The format of a quantized dtype; null for fp32, bf16 and fp16.
const QuantFormat* quant_format(DType d);

// A file's block as its `block` floats, in order along the row.
void decode_block(const QuantFormat& f, const std::byte* src, float* out);
// Column j (0..31) of a packed panel block, from a file's block: the same numbers.
void pack_block(const QuantFormat& f, const std::byte* src, std::uint32_t* dst, int j);
// Column j of a q8_0 panel block quantized from 32 floats as llama.cpp's
// quantize_row_q8_0_ref does (d = max|v| / 127 rounded to fp16, q = round(v / d)).
void quantize_q8_0(const float* v, std::uint32_t* dst, int j);
// A packed panel block as floats: kernels/quant_unpack.hpp, compiled into each ISA path's table.
// One value of a packed panel block: step s, column j.
float packed_value(const QuantFormat& f, const std::uint32_t* src, int s, int j);

}  // namespace ringattn::kernels
