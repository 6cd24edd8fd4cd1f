// ringattn bench — what every benchmark records about the machine it ran on: the CPU
// (model, family and model number, online CPUs), the kernels' ISA path and oneDNN's
// (its effective ISA, capped by ONEDNN_MAX_CPU_ISA), the implementation of the matmuls
// a call of the benchmark's dtype ran on and the type they multiplied. A figure is
// comparable with another only where these agree.
#pragma once

#include <unistd.h>

#include <fstream>
#include <string>

#include "ringattn/block_attention.hpp"
#include "../../src/cli/json_object.hpp"

namespace ringattn::bench {

// The rest of the first line of `path` that starts with `key` (after "key: "), or the
// first line when key is empty; "" if none.
inline std::string first_line_of(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (key.empty() || line.rfind(key, 0) == 0) return key.empty() ? line : line.substr(line.find(':') + 2);
  return "";
}

// "AMD EPYC (family 25, model 17), 2 CPUs": the CPU model, its family and model numbers
// (a bare "AMD EPYC" does not tell Zen 2 from Zen 5) and the online CPUs.
inline std::string machine() {
  std::string cpu = first_line_of("/proc/cpuinfo", "model name");
  const std::string family = first_line_of("/proc/cpuinfo", "cpu family");
  const std::string model = first_line_of("/proc/cpuinfo", "model\t");
  if (!family.empty()) cpu += " (family " + family + (model.empty() ? "" : ", model " + model) + ")";
  return cpu + ", " + std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)) + " CPUs";
}

// The paths a call of `dtype` takes here in words: "kernels avx2, oneDNN avx2 gemm:jit,
// fp32 matmuls".
inline std::string paths(DType dtype, Isa isa = default_isa()) {
  return "kernels " + std::string(to_string(isa)) + ", oneDNN " + matmul_isa() + " " + matmul_implementation(dtype) +
         ", " + std::string(to_string(dtype == DType::bf16 ? bf16_matmul_dtype() : DType::f32)) + " matmuls";
}

// The paths a call of `dtype` takes here, as JSON fields.
inline cli::JsonObject& add_machine(cli::JsonObject& j, DType dtype, Isa isa = default_isa()) {
  return j.add("machine", machine())
      .add("isa", to_string(isa))
      .add("onednn_isa", matmul_isa())
      .add("matmul", matmul_implementation(dtype))
      .add("matmul_dtype", to_string(dtype == DType::bf16 ? bf16_matmul_dtype() : DType::f32));
}

}  // namespace ringattn::bench
