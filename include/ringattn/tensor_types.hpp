// ringattn — the one table of tensor types (as ggml's type_traits): for each weight type
// its names (ringattn's DType, GGUF's ggml type id and name, safetensors' dtype string),
// its block (values along a row, bytes), how it widens to fp32, which Linear kernel path
// holds it, and where a tensor-parallel split may cut a row. The GGUF and safetensors
// readers, the tensor-parallel split and ringattn::Linear all read this table; a type
// without a row is refused by name, never handed to another type's decoder.
//
//   const ringattn::TensorType* t = ringattn::find_ggml_type(12);   // Q4_K
//   t->block_values, t->block_bytes;                                // 256, 144
//   t->row_bytes(4096);                                             // 2304: 16 blocks
//   t->splits_at(128);                                              // false: not on a block
//   ringattn::find_ggml_type(13);                                   // null: Q5_K has no row
//   ringattn::ggml_type_name(13);                                   // "Q5_K", for the refusal
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ringattn/types.hpp"

namespace ringattn {

// How ringattn::Linear holds a type's weights, and so which of its kernel loops reads
// them: fp32 [K][32] floats, bf16 word pairs, fp16 [K][32] halves, or a block format's
// packed panel blocks (unpacked to fp32 by the path's unpack, or folded in registers).
enum class LinearPath : std::uint8_t { f32 = 0, bf16 = 1, f16 = 2, blocks = 3 };

// `blocks` blocks of a type at src, widened to block_values * blocks floats (exact: llama.cpp's
// dequantize_row_* values to the bit for the block formats).
using WidenFn = void (*)(const std::byte* src, std::int64_t blocks, float* out) noexcept;

struct TensorType {
  DType dtype;
  std::string_view name;         // ringattn's, as to_string(dtype): "fp32", "q4_k"
  std::uint32_t ggml_id;         // GGUF's ggml_type (ggml.h)
  std::string_view ggml_name;    // llama.cpp's name of it: "F32", "Q4_K"
  std::string_view safetensors;  // safetensors' dtype string; empty where that format has none
  std::int64_t block_values;     // values a block holds along a row (1: one value each)
  std::int64_t block_bytes;      // a block's bytes in a file (ggml-common.h's sizeof(block_*))
  LinearPath linear;             // the Linear kernel path that holds it
  int scales;                    // the block's fp16 scales (0: the values are the bits)
  std::uint16_t scale_at[2];     // their byte offsets in the block (NaN/inf shows there)
  std::uint32_t exponent;        // one value's exponent bits, all ones for NaN/inf (block formats: 0)
  WidenFn widen;

  // The tensor-parallel split rule: a cut along a row (a part's first column, or its
  // count) falls on whole blocks; then each part's bytes are whole blocks of the file's.
  bool splits_at(std::int64_t values) const noexcept { return values >= 0 && values % block_values == 0; }
  // Bytes of `values` values along a row; nullopt if they are not whole blocks (or negative,
  // or past 2^62 bytes).
  std::optional<std::uint64_t> row_bytes(std::int64_t values) const noexcept;
};

// Every row, in DType order (tensor_types()[i].dtype == DType(i)).
std::span<const TensorType> tensor_types() noexcept;
// The row of d; null for a value with none (a DType cast from a number past the enum).
const TensorType* find_tensor_type(DType d) noexcept;
// The row of d; throws InvalidArgument naming the value for one with none.
const TensorType& tensor_type(DType d);
// The row of GGUF's ggml type `id`; null if this table has none.
const TensorType* find_ggml_type(std::uint32_t id) noexcept;
// The row of a safetensors dtype string ("F32", "BF16", "F16"); null if none.
const TensorType* find_safetensors_type(std::string_view dtype) noexcept;
// ggml.h's name of any ggml type id ("Q5_K" for 13, "Q4_0" for 2), whether or not this
// table has a row for it; empty for an id ggml does not define. For refusals by name.
std::string_view ggml_type_name(std::uint32_t id) noexcept;
// The names one format reads, for refusals: "F32, BF16, F16, Q8_0, Q4_K, Q6_K" (GGUF);
// "F32, BF16 and F16" (safetensors, `last` = " and ").
std::string ggml_type_names();
std::string safetensors_type_names(std::string_view last = ", ");

}  // namespace ringattn
