#include "ringattn/types.hpp"

#include "ringattn/error.hpp"

namespace ringattn {

std::string_view to_string(DType d) {
  switch (d) {
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::q8_0: return "q8_0";
    case DType::q4_k: return "q4_k";
    case DType::q6_k: return "q6_k";
    default: return "fp32";
  }
}

DType parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "f32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  throw InvalidArgument("dtype: expected fp32 or bf16, got '" + std::string(s) + "'");
}

DType parse_weights_dtype(std::string_view s) {
  if (s == "fp16" || s == "f16" || s == "float16") return DType::f16;
  if (s == "q8_0") return DType::q8_0;
  if (s == "fp32" || s == "f32" || s == "float32" || s == "bf16" || s == "bfloat16") return parse_dtype(s);
  throw InvalidArgument("weights dtype: expected fp32, bf16, fp16 or q8_0, got '" + std::string(s) + "'");
}

std::string to_string(const Mask& m) {
  switch (m.kind) {
    case MaskKind::none: return "none";
    case MaskKind::causal: return "causal";
    case MaskKind::window: return "window:" + std::to_string(m.window);
  }
  return "?";
}

namespace {
struct IsaName {
  Isa isa;
  std::string_view name;
};
constexpr IsaName kIsaNames[] = {
    {Isa::generic, "generic"}, {Isa::avx2, "avx2"}, {Isa::avx512, "avx512"}, {Isa::neon, "neon"}};
}  // namespace

std::string_view to_string(Isa i) {
  for (const IsaName& n : kIsaNames)
    if (n.isa == i) return n.name;
  return "?";
}

std::string isa_names() {
  std::string all;
  for (const IsaName& n : kIsaNames) all += (all.empty() ? "" : ", ") + std::string(n.name);
  return all;
}

Isa parse_isa(std::string_view s) {
  if (s == "scalar") return Isa::generic;  // the generic path's old name
  for (const IsaName& n : kIsaNames)
    if (n.name == s) return n.isa;
  throw InvalidArgument("isa: expected one of " + isa_names() + "; got '" + std::string(s) + "'");
}

}  // namespace ringattn
