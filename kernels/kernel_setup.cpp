#include "kernels/kernel_setup.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/dispatch.hpp"
#include "kernels/matmul_cache.hpp"
#include "ringattn/error.hpp"

namespace ringattn::kernels {

KernelSetup set_up(const AttentionConfig& cfg) {
  auto bad = [](const std::string& what) { throw InvalidArgument("attention config: " + what); };
  if (cfg.heads < 1) bad("heads = " + std::to_string(cfg.heads) + " must be >= 1");
  if (cfg.kv_heads < 1) bad("kv_heads = " + std::to_string(cfg.kv_heads) + " must be >= 1");
  if (cfg.heads % cfg.kv_heads != 0)
    bad("kv_heads = " + std::to_string(cfg.kv_heads) + " does not divide heads = " + std::to_string(cfg.heads));
  if (std::find(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims), cfg.head_dim) ==
      std::end(kSupportedHeadDims)) {
    std::string list;
    for (auto d : kSupportedHeadDims) list += (list.empty() ? "" : ", ") + std::to_string(d);
    bad("head_dim = " + std::to_string(cfg.head_dim) + " is not supported (supported: " + list + ")");
  }
  if (cfg.dtype != DType::f32 && cfg.dtype != DType::bf16)
    bad("dtype = " + std::string(to_string(cfg.dtype)) + ": attention takes fp32 or bf16 inputs");
  if (cfg.mask.kind == MaskKind::window && cfg.mask.window < 1)
    bad("window = " + std::to_string(cfg.mask.window) + " must be >= 1");
  if (!(cfg.scale >= 0.0f) || std::isinf(cfg.scale)) bad("scale = " + std::to_string(cfg.scale) + " must be finite and > 0");
  if (cfg.threads < 0 || cfg.threads > kMaxThreads)
    bad("threads = " + std::to_string(cfg.threads) + " must be in 0.." + std::to_string(kMaxThreads) + " (0: all cores)");
  KernelSetup s{cfg, Isa::generic, nullptr, DType::f32, 1};
  if (s.cfg.scale == 0.0f) s.cfg.scale = 1.0f / std::sqrt(static_cast<float>(cfg.head_dim));
  s.isa = resolve_isa(cfg.isa);
  s.ops = &ops_for(s.isa);  // throws if the CPU lacks it
  if (cfg.dtype == DType::f32) {
    if (cfg.matmul_dtype && *cfg.matmul_dtype != DType::f32)
      bad("matmul_dtype = bf16 for fp32 inputs: an fp32 call multiplies fp32");
  } else {
    s.mm = cfg.matmul_dtype.value_or(bf16_matmul_dtype());
    if (s.mm == DType::bf16 && !bf16_matmul_native())
      bad("matmul_dtype = bf16, but this CPU has no bf16 matmul units (oneDNN: " +
          kernels::matmul_implementation(DType::bf16) + "); leave it unset to multiply fp32");
  }
  s.cfg.matmul_dtype = s.mm;
  s.threads = cfg.threads > 0 ? cfg.threads : omp_get_max_threads();
  return s;
}

std::string check_docs(const char* side, std::span<const std::int32_t> docs, std::int64_t rows) {
  if (static_cast<std::int64_t>(docs.size()) != rows)
    return std::string(side) + " has " + std::to_string(docs.size()) + " document ids for " + std::to_string(rows) +
           " rows";
  for (std::size_t i = 1; i < docs.size(); ++i)
    if (docs[i] < docs[i - 1])
      return std::string(side) + " document ids decrease at row " + std::to_string(i) + " (" +
             std::to_string(docs[i - 1]) + " then " + std::to_string(docs[i]) +
             "): each document must be one contiguous run of increasing positions";
  return {};
}

void check_ptr(const void* p, std::size_t align, const char* name, const char* who) {
  if (!p) throw InvalidArgument(std::string(who) + ": " + name + " is a null pointer");
  if (reinterpret_cast<std::uintptr_t>(p) % align != 0)
    throw InvalidArgument(std::string(who) + ": " + name + " is not aligned to " + std::to_string(align) +
                          " bytes (address " + std::to_string(reinterpret_cast<std::uintptr_t>(p)) + ")");
}

}  // namespace ringattn::kernels
