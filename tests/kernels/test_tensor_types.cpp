// The table of tensor types (include/ringattn/tensor_types.hpp): each row's block against
// llama.cpp's ggml-common.h and its names against ggml.h, its look-ups by every name, the
// split rule, the kernels' panel formats agreeing with it, and a type without a row refused
// by name rather than read as another.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/quant_blocks.hpp"
#include "ringattn/blocks.hpp"
#include "ringattn/error.hpp"
#include "ringattn/half.hpp"
#include "ringattn/tensor_types.hpp"

using namespace ringattn;

namespace {

// llama.cpp's ggml-common.h and ggml.h, written out here (not read from the table):
// QK8_0 = 32, sizeof(block_q8_0) = sizeof(ggml_half) + QK8_0 = 34; QK_K = 256,
// sizeof(block_q4_K) = 2 * sizeof(ggml_half) + K_SCALE_SIZE (12) + QK_K / 2 = 144,
// sizeof(block_q6_K) = sizeof(ggml_half) + QK_K / 16 + 3 * QK_K / 4 = 210.
struct Expected {
  DType dtype;
  const char* name;
  std::uint32_t ggml_id;
  const char* ggml_name;
  const char* safetensors;
  std::int64_t values, bytes;
  LinearPath path;
};
const Expected kLlamaCpp[] = {
    {DType::f32, "fp32", 0, "F32", "F32", 1, 4, LinearPath::f32},
    {DType::bf16, "bf16", 30, "BF16", "BF16", 1, 2, LinearPath::bf16},
    {DType::f16, "fp16", 1, "F16", "F16", 1, 2, LinearPath::f16},
    {DType::q8_0, "q8_0", 8, "Q8_0", "", 32, 2 + 32, LinearPath::blocks},
    {DType::q4_k, "q4_k", 12, "Q4_K", "", 256, 2 * 2 + 12 + 256 / 2, LinearPath::blocks},
    {DType::q6_k, "q6_k", 14, "Q6_K", "", 256, 2 + 256 / 16 + 3 * 256 / 4, LinearPath::blocks},
};

}  // namespace

TEST_CASE("tensor types: every row's block and names are llama.cpp's, one row a DType in its order") {
  const auto rows = tensor_types();
  REQUIRE(rows.size() == std::size(kLlamaCpp));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const TensorType& t = rows[i];
    const Expected& e = kLlamaCpp[i];
    CAPTURE(e.name);
    CHECK(t.dtype == e.dtype);
    CHECK(static_cast<std::size_t>(t.dtype) == i);
    CHECK(t.name == e.name);
    CHECK(t.name == to_string(t.dtype));
    CHECK(t.ggml_id == e.ggml_id);
    CHECK(t.ggml_name == e.ggml_name);
    CHECK(ggml_type_name(t.ggml_id) == e.ggml_name);
    CHECK(t.safetensors == e.safetensors);
    CHECK(t.block_values == e.values);
    CHECK(t.block_bytes == e.bytes);
    CHECK(t.linear == e.path);
    CHECK(block_values(t.dtype) == e.values);
    CHECK(block_bytes(t.dtype) == e.bytes);
    CHECK(&tensor_type(t.dtype) == &t);
    CHECK(find_tensor_type(t.dtype) == &t);
    CHECK(find_ggml_type(t.ggml_id) == &t);
    if (!t.safetensors.empty()) {
      CHECK(find_safetensors_type(t.safetensors) == &t);
      CHECK(t.block_values == 1);  // the safetensors reader sizes its tensors by elements
    }
    // The element-wise types are dtype_size wide; the kernels hold a block format as the
    // table says (a panel format exactly for the rows on the blocks path, of the same block).
    if (t.block_values == 1) CHECK(static_cast<std::size_t>(t.block_bytes) == dtype_size(t.dtype));
    const kernels::QuantFormat* f = kernels::quant_format(t.dtype);
    CHECK((f != nullptr) == (t.linear == LinearPath::blocks));
    if (f) {
      CHECK(f->block == t.block_values);
      CHECK(f->bytes == t.block_bytes);
      CHECK(t.scales >= 1);
    } else {
      CHECK(t.scales == 0);
      CHECK(t.exponent != 0);
    }
  }
  CHECK(safetensors_type_names(" and ") == "F32, BF16 and F16");
  CHECK(ggml_type_names() == "F32, BF16, F16, Q8_0, Q4_K, Q6_K");
}

TEST_CASE("tensor types: a type without a row is found by no name, and named for the refusal") {
  // ggml's types this table has no row for: named (ggml.h), never another row's.
  for (const auto& [id, name] : {std::pair<std::uint32_t, const char*>{2, "Q4_0"}, {13, "Q5_K"}, {10, "Q2_K"},
                                 {9, "Q8_1"}, {24, "I8"}, {28, "F64"}, {39, "MXFP4"}}) {
    CAPTURE(id);
    CHECK(find_ggml_type(id) == nullptr);
    CHECK(ggml_type_name(id) == name);
  }
  CHECK(ggml_type_name(4).empty());  // removed from ggml
  CHECK(ggml_type_name(99).empty());
  CHECK(find_ggml_type(99) == nullptr);
  for (const char* s : {"I8", "U8", "F64", "F8_E4M3", "BOOL", "Q8_0", "f32", "", "bf16"}) {
    CAPTURE(s);
    CHECK(find_safetensors_type(s) == nullptr);
  }
  const auto past = static_cast<DType>(9);
  CHECK(find_tensor_type(past) == nullptr);
  CHECK_THROWS_WITH_AS(tensor_type(past), doctest::Contains("DType 9 has no row in the table of tensor types"),
                       InvalidArgument);
  CHECK_THROWS_AS(block_values(past), InvalidArgument);
  float out[32];
  CHECK_THROWS_WITH_AS(decode_blocks(past, out, 1, out), doctest::Contains("DType 9"), InvalidArgument);
}

TEST_CASE("tensor types: the split rule and a row's bytes: whole blocks only, no overflow") {
  const TensorType& q4 = tensor_type(DType::q4_k);
  CHECK(q4.row_bytes(4096) == std::optional<std::uint64_t>(16 * 144));
  CHECK(q4.row_bytes(0) == std::optional<std::uint64_t>(0));
  CHECK_FALSE(q4.row_bytes(128).has_value());
  CHECK_FALSE(q4.row_bytes(-256).has_value());
  CHECK_FALSE(q4.row_bytes(std::numeric_limits<std::int64_t>::max() / 256 * 256).has_value());  // past 2^62 bytes
  CHECK(q4.splits_at(512));
  CHECK_FALSE(q4.splits_at(128));
  CHECK_FALSE(q4.splits_at(-256));
  const TensorType& q8 = tensor_type(DType::q8_0);
  CHECK(q8.splits_at(32));
  CHECK_FALSE(q8.splits_at(48));
  CHECK(q8.row_bytes(96) == std::optional<std::uint64_t>(3 * 34));
  const TensorType& f32 = tensor_type(DType::f32);
  CHECK(f32.splits_at(7));
  CHECK(f32.row_bytes(7) == std::optional<std::uint64_t>(28));
  CHECK_THROWS_WITH_AS(decode_blocks(DType::q8_0, std::vector<std::byte>(34).data(), 16, std::vector<float>(32).data()),
                       doctest::Contains("16 values are not whole q8_0 blocks of 32"), InvalidArgument);
}

TEST_CASE("tensor types: each row widens as its format holds values") {
  // fp32, bf16 and fp16: the bits, widened exactly.
  const float f[2] = {1.5f, -0.25f};
  float out[2];
  tensor_type(DType::f32).widen(reinterpret_cast<const std::byte*>(f), 2, out);
  CHECK(out[0] == 1.5f);
  CHECK(out[1] == -0.25f);
  const std::uint16_t b[2] = {0x3FC0, 0xBE80};  // bf16 1.5, -0.25
  tensor_type(DType::bf16).widen(reinterpret_cast<const std::byte*>(b), 2, out);
  CHECK(out[0] == 1.5f);
  CHECK(out[1] == -0.25f);
  const std::uint16_t h[2] = {to_f16(1.5f), to_f16(-0.25f)};
  tensor_type(DType::f16).widen(reinterpret_cast<const std::byte*>(h), 2, out);
  CHECK(out[0] == 1.5f);
  CHECK(out[1] == -0.25f);
  // q8_0: d * q, two blocks.
  std::vector<std::byte> q(68);
  const std::uint16_t d0 = to_f16(0.5f), d1 = to_f16(-2.0f);
  std::memcpy(q.data(), &d0, 2);
  std::memcpy(q.data() + 34, &d1, 2);
  for (int i = 0; i < 32; ++i) {
    q[2 + i] = static_cast<std::byte>(static_cast<std::int8_t>(i - 16));
    q[36 + i] = static_cast<std::byte>(static_cast<std::int8_t>(3));
  }
  std::vector<float> v(64);
  tensor_type(DType::q8_0).widen(q.data(), 2, v.data());
  for (int i = 0; i < 32; ++i) {
    CHECK(v[static_cast<std::size_t>(i)] == 0.5f * static_cast<float>(i - 16));
    CHECK(v[static_cast<std::size_t>(32 + i)] == -6.0f);
  }
}
