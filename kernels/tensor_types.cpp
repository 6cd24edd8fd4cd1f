// The tensor-type table's look-ups (include/ringattn/tensor_types.hpp); the rows are
// kernels/tensor_table.hpp's.
#include "ringattn/tensor_types.hpp"

#include <vector>

#include "kernels/tensor_table.hpp"
#include "ringattn/error.hpp"

namespace ringattn {

namespace {

// ggml.h's enum ggml_type, for naming a type this table has no row for (ids 4, 5 and
// 31-33, 36-38 were removed from ggml: no name).
constexpr std::string_view kGgmlNames[] = {
    "F32",    "F16",    "Q4_0",   "Q4_1",  "",       "",        "Q5_0",    "Q5_1",  "Q8_0",  "Q8_1",
    "Q2_K",   "Q3_K",   "Q4_K",   "Q5_K",  "Q6_K",   "Q8_K",    "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
    "IQ4_NL", "IQ3_S",  "IQ2_S",  "IQ4_XS", "I8",    "I16",     "I32",     "I64",   "F64",   "IQ1_M",
    "BF16",   "",       "",       "",      "TQ1_0",  "TQ2_0",   "",        "",      "",      "MXFP4"};

constexpr bool rows_named_as_ggml() {
  for (const TensorType& t : kernels::kTensorTypes)
    if (t.ggml_id >= std::size(kGgmlNames) || kGgmlNames[t.ggml_id] != t.ggml_name) return false;
  return true;
}
static_assert(rows_named_as_ggml(), "kTensorTypes: each row's ggml name is ggml.h's for its id");

constexpr std::uint64_t kMaxRowBytes = std::uint64_t{1} << 62;

}  // namespace

std::optional<std::uint64_t> TensorType::row_bytes(std::int64_t values) const noexcept {
  if (!splits_at(values)) return std::nullopt;
  const auto blocks = static_cast<std::uint64_t>(values / block_values), size = static_cast<std::uint64_t>(block_bytes);
  if (blocks > kMaxRowBytes / size) return std::nullopt;
  return blocks * size;
}

std::span<const TensorType> tensor_types() noexcept { return kernels::kTensorTypes; }

const TensorType* find_tensor_type(DType d) noexcept { return kernels::tensor_row(d); }

const TensorType& tensor_type(DType d) {
  if (const TensorType* t = kernels::tensor_row(d)) return *t;
  std::string names;
  for (const TensorType& t : kernels::kTensorTypes) names += (names.empty() ? "" : ", ") + std::string(t.name);
  throw InvalidArgument("tensor type: DType " + std::to_string(static_cast<int>(d)) +
                        " has no row in the table of tensor types (" + names + ")");
}

const TensorType* find_ggml_type(std::uint32_t id) noexcept {
  for (const TensorType& t : kernels::kTensorTypes)
    if (t.ggml_id == id) return &t;
  return nullptr;
}

const TensorType* find_safetensors_type(std::string_view dtype) noexcept {
  for (const TensorType& t : kernels::kTensorTypes)
    if (!t.safetensors.empty() && t.safetensors == dtype) return &t;
  return nullptr;
}

std::string_view ggml_type_name(std::uint32_t id) noexcept {
  return id < std::size(kGgmlNames) ? kGgmlNames[id] : std::string_view();
}

std::string ggml_type_names() {
  std::string s;
  for (const TensorType& t : kernels::kTensorTypes) s += (s.empty() ? "" : ", ") + std::string(t.ggml_name);
  return s;
}

std::string safetensors_type_names(std::string_view last) {
  std::vector<std::string_view> names;
  for (const TensorType& t : kernels::kTensorTypes)
    if (!t.safetensors.empty()) names.push_back(t.safetensors);
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == names.size() ? last : std::string_view(", ")) + std::string(names[i]);
  return s;
}

}  // namespace ringattn
