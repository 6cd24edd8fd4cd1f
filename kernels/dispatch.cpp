// One run-time dispatch for every ISA-specific piece. The best path the CPU supports
// wins unless a caller forces one (config, CLI --isa) or the environment does
// (RINGATTN_ISA=generic|avx2|avx512|neon). Forcing a path the CPU lacks is an error,
// not a silent fallback: a benchmark that says "avx2" must have run avx2.
#include "kernels/dispatch.hpp"

#include <cstdlib>
#include <string>

#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn_config.h"

namespace ringattn {

namespace {

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::generic: return true;
#if RINGATTN_HAVE_AVX512
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#endif
#if RINGATTN_HAVE_AVX2
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
#if RINGATTN_HAVE_NEON
    case Isa::neon: return true;  // baseline on aarch64
#endif
    default: return false;
  }
}

}  // namespace

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::avx512, Isa::avx2, Isa::neon, Isa::generic})
    if (cpu_has(i)) out.push_back(i);
  return out;
}

Isa default_isa() { return kernels::resolve_isa(std::nullopt); }

namespace kernels {

const SoftmaxOps& ops_for(Isa isa) {
  if (!cpu_has(isa)) {
    std::string have;
    for (Isa i : available_isas()) have += (have.empty() ? "" : ", ") + std::string(to_string(i));
    throw InvalidArgument("isa: '" + std::string(to_string(isa)) +
                          "' is not available on this CPU/build (available: " + have + ")");
  }
  switch (isa) {
#if RINGATTN_HAVE_AVX512
    case Isa::avx512: return kOpsAvx512;
#endif
#if RINGATTN_HAVE_AVX2
    case Isa::avx2: return kOpsAvx2;
#endif
#if RINGATTN_HAVE_NEON
    case Isa::neon: return kOpsNeon;
#endif
    default: return kOpsGeneric;
  }
}

std::vector<const LinearOps*> linear_ops_variants(Isa isa) {
  ops_for(isa);  // the same check and message
  switch (isa) {
#if RINGATTN_HAVE_AVX512
    case Isa::avx512:
      // bf16 pairs by the dot instruction where the CPU has it (Zen 4+, Sapphire Rapids+).
      if (__builtin_cpu_supports("avx512bf16")) return {&kLinearAvx512Bf16, &kLinearAvx512};
      return {&kLinearAvx512};
#endif
    default: return {&linear_ops_for(isa)};
  }
}

const LinearOps& linear_ops_for(Isa isa) {
  ops_for(isa);  // the same check and message
  switch (isa) {
#if RINGATTN_HAVE_AVX512
    case Isa::avx512: return *linear_ops_variants(isa).front();
#endif
#if RINGATTN_HAVE_AVX2
    case Isa::avx2: return kLinearAvx2;
#endif
    default: return kLinearGeneric;  // NEON: the generic loops, which aarch64's baseline vectorises
  }
}

Isa resolve_isa(const std::optional<Isa>& forced) {
  if (forced) return *forced;
  if (const char* env = std::getenv("RINGATTN_ISA"); env && *env) {
    try {
      return parse_isa(env);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("environment RINGATTN_ISA: ") + e.what());
    }
  }
  return available_isas().front();
}

}  // namespace kernels
}  // namespace ringattn
