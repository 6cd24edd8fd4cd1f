// One run-time dispatch for every ISA-specific piece: the registry below, one entry per
// path this build has ({ISA, CPU check, routines}), best first. The best path the CPU
// supports wins unless a caller forces one (config, CLI --isa) or the environment does
// (RINGATTN_ISA, one of isa_names()). Forcing a path the CPU lacks is an error, not a
// silent fallback: a benchmark that says "avx2" must have run avx2.
#include "kernels/dispatch.hpp"

#include <cstdlib>
#include <string>

#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn_config.h"

namespace ringattn {
namespace kernels {
namespace {

bool always() { return true; }
#if RINGATTN_HAVE_AVX512
bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}
bool has_avx512_bf16() { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }  // Zen 4+, Sapphire Rapids+
bool has_avx512_vnni() { return has_avx512() && __builtin_cpu_supports("avx512vnni"); }  // Cascade Lake+, Zen 4+
bool has_avx512_vnni_vbmi() { return has_avx512_vnni() && __builtin_cpu_supports("avx512vbmi"); }  // Ice Lake+, Zen 4+
#endif
#if RINGATTN_HAVE_AVX2
bool has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
#endif

struct IsaPath {
  Isa isa;
  bool (*cpu_has)();
  const SoftmaxOps* attention;  // the attention kernels' row passes (softmax_ops.hpp)
  const LinearOps* linear;      // the weight matmul's panel loop (linear_ops.hpp)
  // A faster weight-matmul table where the CPU has more than the path needs (tried first).
  const LinearOps* linear_plus = nullptr;
  bool (*plus_has)() = nullptr;
  const IntOps* ints = nullptr;       // the block formats' integer arithmetic (int_ops.hpp)
  const IntOps* ints_plus = nullptr;  // a faster one where the CPU has more (tried first)
  bool (*ints_plus_has)() = nullptr;
  const IntOps* ints_best = nullptr;  // faster still (tried before ints_plus)
  bool (*ints_best_has)() = nullptr;
};

const IsaPath kPaths[] = {
#if RINGATTN_HAVE_AVX512
    {.isa = Isa::avx512, .cpu_has = has_avx512, .attention = &kOpsAvx512, .linear = &kLinearAvx512,
     .linear_plus = &kLinearAvx512Bf16, .plus_has = has_avx512_bf16, .ints = &kIntAvx512,
     .ints_plus = &kIntAvx512Vnni, .ints_plus_has = has_avx512_vnni, .ints_best = &kIntAvx512VnniVbmi,
     .ints_best_has = has_avx512_vnni_vbmi},
#endif
#if RINGATTN_HAVE_AVX2
    {.isa = Isa::avx2, .cpu_has = has_avx2, .attention = &kOpsAvx2, .linear = &kLinearAvx2, .ints = &kIntAvx2},
#endif
#if RINGATTN_HAVE_NEON
    // The weight matmul's generic loops, which aarch64's baseline vectorises.
    {.isa = Isa::neon, .cpu_has = always, .attention = &kOpsNeon, .linear = &kLinearGeneric, .ints = &kIntNeon},
#endif
    {.isa = Isa::generic, .cpu_has = always, .attention = &kOpsGeneric, .linear = &kLinearGeneric, .ints = &kIntGeneric},
};

// The entry of `isa`; throws InvalidArgument if this build or this CPU lacks it.
const IsaPath& path(Isa isa) {
  for (const IsaPath& p : kPaths)
    if (p.isa == isa && p.cpu_has()) return p;
  std::string have;
  for (Isa i : available_isas()) have += (have.empty() ? "" : ", ") + std::string(to_string(i));
  throw InvalidArgument("isa: '" + std::string(to_string(isa)) + "' is not available on this CPU/build (available: " +
                        have + ")");
}

}  // namespace

const SoftmaxOps& ops_for(Isa isa) { return *path(isa).attention; }

std::vector<const LinearOps*> linear_ops_variants(Isa isa) {
  const IsaPath& p = path(isa);
  if (p.linear_plus && p.plus_has()) return {p.linear_plus, p.linear};
  return {p.linear};
}

const LinearOps& linear_ops_for(Isa isa) {
  const IsaPath& p = path(isa);
  return p.linear_plus && p.plus_has() ? *p.linear_plus : *p.linear;
}

std::vector<const IntOps*> int_ops_variants(Isa isa) {
  const IsaPath& p = path(isa);
  std::vector<const IntOps*> out;
  if (p.ints_best && p.ints_best_has()) out.push_back(p.ints_best);
  if (p.ints_plus && p.ints_plus_has()) out.push_back(p.ints_plus);
  out.push_back(p.ints);
  return out;
}

const IntOps& int_ops_for(Isa isa) { return *int_ops_variants(isa).front(); }

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

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (const kernels::IsaPath& p : kernels::kPaths)
    if (p.cpu_has()) out.push_back(p.isa);
  return out;
}

Isa default_isa() { return kernels::resolve_isa(std::nullopt); }

}  // namespace ringattn
