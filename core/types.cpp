#include "ringattn/types.hpp"

#include "ringattn/error.hpp"

namespace ringattn {

std::string_view to_string(DType d) { return d == DType::bf16 ? "bf16" : "fp32"; }

DType parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "f32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  throw InvalidArgument("dtype: expected fp32 or bf16, got '" + std::string(s) + "'");
}

std::string to_string(const Mask& m) {
  switch (m.kind) {
    case MaskKind::none: return "none";
    case MaskKind::causal: return "causal";
    case MaskKind::window: return "window:" + std::to_string(m.window);
  }
  return "?";
}

std::string_view to_string(Isa i) {
  switch (i) {
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::neon: return "neon";
  }
  return "?";
}

Isa parse_isa(std::string_view s) {
  if (s == "generic" || s == "scalar") return Isa::generic;
  if (s == "avx2") return Isa::avx2;
  if (s == "avx512") return Isa::avx512;
  if (s == "neon") return Isa::neon;
  throw InvalidArgument("isa: expected one of generic, avx2, avx512, neon; got '" + std::string(s) + "'");
}

}  // namespace ringattn
