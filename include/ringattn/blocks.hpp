// ringattn — GGUF's block formats for weights (q8_0, q4_k, q6_k): their sizes, and their
// values as llama.cpp's dequantize_row_* gives them (to the bit). ringattn::Linear holds
// them packed (kernels/quant_blocks.hpp has both layouts); a loader sizes and reads a
// file's tensors with these. All three read the table of tensor types
// (ringattn/tensor_types.hpp); a DType without a row there throws InvalidArgument naming it.
//
//   std::vector<float> row(4096);
//   ringattn::decode_blocks(ringattn::DType::q4_k, bytes, 4096, row.data());  // 16 blocks, 2304 bytes
#pragma once

#include <cstdint>

#include "ringattn/tensor_types.hpp"
#include "ringattn/types.hpp"

namespace ringattn {

// Values a block holds along a row: 32 (q8_0), 256 (q4_k, q6_k); 1 for fp32, bf16, fp16.
std::int64_t block_values(DType d);
// A block's bytes: 34, 144, 210; dtype_size for fp32, bf16, fp16.
std::int64_t block_bytes(DType d);
// `values` values (a multiple of block_values(d), else InvalidArgument) of dtype d at src,
// widened to fp32.
void decode_blocks(DType d, const void* src, std::int64_t values, float* out);

}  // namespace ringattn
