// ringattn kernels — the rows of the tensor-type table (include/ringattn/tensor_types.hpp),
// as a constant the kernels build their own facts from at compile time (quant_blocks.cpp's
// panel formats take their block sizes from here). One row a DType, in its order; the
// numbers are llama.cpp's ggml-common.h (QK8_0 = 32, sizeof(block_q8_0) = 34; QK_K = 256,
// sizeof(block_q4_K) = 144, sizeof(block_q6_K) = 210) and ggml.h's type ids.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ringattn/tensor_types.hpp"

namespace ringattn::kernels {

// Each type's widening (kernels/widen.cpp: fp32, bf16, fp16; kernels/quant_blocks.cpp: the
// block formats).
void widen_f32(const std::byte* src, std::int64_t blocks, float* out) noexcept;
void widen_bf16(const std::byte* src, std::int64_t blocks, float* out) noexcept;
void widen_f16(const std::byte* src, std::int64_t blocks, float* out) noexcept;
void widen_q8_0(const std::byte* src, std::int64_t blocks, float* out) noexcept;
void widen_q4_k(const std::byte* src, std::int64_t blocks, float* out) noexcept;
void widen_q6_k(const std::byte* src, std::int64_t blocks, float* out) noexcept;

// dtype, name, ggml id, ggml name, safetensors, block values, block bytes, Linear path,
// fp16 scales and their offsets, element exponent bits, widen.
inline constexpr TensorType kTensorTypes[] = {
    {DType::f32, "fp32", 0, "F32", "F32", 1, 4, LinearPath::f32, 0, {0, 0}, 0x7F800000u, widen_f32},
    {DType::bf16, "bf16", 30, "BF16", "BF16", 1, 2, LinearPath::bf16, 0, {0, 0}, 0x7F80u, widen_bf16},
    {DType::f16, "fp16", 1, "F16", "F16", 1, 2, LinearPath::f16, 0, {0, 0}, 0x7C00u, widen_f16},
    // fp16 d, int8 q[32]
    {DType::q8_0, "q8_0", 8, "Q8_0", "", 32, 34, LinearPath::blocks, 1, {0, 0}, 0, widen_q8_0},
    // fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit q
    {DType::q4_k, "q4_k", 12, "Q4_K", "", 256, 144, LinearPath::blocks, 2, {0, 2}, 0, widen_q4_k},
    // 128 bytes of q's low 4 bits, 64 of its high 2, int8 scales[16], fp16 d
    {DType::q6_k, "q6_k", 14, "Q6_K", "", 256, 210, LinearPath::blocks, 1, {208, 0}, 0, widen_q6_k},
};

inline constexpr std::size_t kTensorTypeCount = sizeof kTensorTypes / sizeof kTensorTypes[0];

// The row of d, at compile time; null past the table.
constexpr const TensorType* tensor_row(DType d) noexcept {
  const auto i = static_cast<std::size_t>(d);
  return i < kTensorTypeCount ? &kTensorTypes[i] : nullptr;
}

constexpr bool rows_in_dtype_order() {
  for (std::size_t i = 0; i < kTensorTypeCount; ++i)
    if (static_cast<std::size_t>(kTensorTypes[i].dtype) != i) return false;
  return true;
}
static_assert(rows_in_dtype_order(), "kTensorTypes: row i is DType(i)");
static_assert(kTensorTypeCount == static_cast<std::size_t>(DType::q6_k) + 1, "kTensorTypes: one row a DType");

}  // namespace ringattn::kernels
