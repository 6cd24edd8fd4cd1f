#include "kernels/matmul_cache.hpp"

#include <omp.h>

#include <cstdint>
#include <string>

#include "ringattn/error.hpp"

namespace ringattn::kernels {

using dnnl::memory;

namespace {

dnnl::matmul::primitive_desc tile_matmul(const dnnl::engine& engine, DType operands) {
  const auto dt = operands == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::desc a({64, 128}, dt, {128, 1}), b({128, 512}, dt, {512, 1});
  const memory::desc c({64, 512}, memory::data_type::f32, {512, 1});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), engine);
}

}  // namespace

std::string matmul_implementation(DType operands) {
  auto probe = [](DType t) -> std::string {
    try {
      return tile_matmul(dnnl::engine(dnnl::engine::kind::cpu, 0), t).impl_info_str();
    } catch (const dnnl::error& e) {
      return std::string("none (") + e.what() + ")";
    }
  };
  static const std::string f32 = probe(DType::f32), bf16 = probe(DType::bf16);  // a primitive costs ~0.3 ms
  return operands == DType::bf16 ? bf16 : f32;
}

std::string onednn_isa() {
  using dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case cpu_isa::sse41: return "sse41";
    case cpu_isa::avx: return "avx";
    case cpu_isa::avx2: return "avx2";
    case cpu_isa::avx2_vnni: return "avx2_vnni";
    case cpu_isa::avx512_mic: return "avx512_mic";
    case cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case cpu_isa::avx512_core: return "avx512_core";
    case cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case cpu_isa::all: return "all";
  }
  return "unknown";
}

bool bf16_matmul_native() {
  static const bool native = [] {
    const auto need = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    if ((static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & need) != need) return false;
    return matmul_implementation(DType::bf16).rfind("brg:", 0) == 0;
  }();
  return native;
}

MatmulCache::MatmulCache() : engine_(dnnl::engine::kind::cpu, 0) {}

void MatmulCache::prepare(const MatmulShape& s, int threads) {
  if (prims_.count(s)) return;
  // oneDNN reads the OpenMP thread count when it creates the primitive.
  struct ThreadScope {
    int saved = omp_get_max_threads();
    explicit ThreadScope(int t) { omp_set_num_threads(t); }
    ~ThreadScope() { omp_set_num_threads(saved); }
  } scope(threads);
  const auto dt = s.dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  Entry e;
  e.a_md = s.a_transposed ? memory::desc({s.m, s.k}, dt, {1, s.lda}) : memory::desc({s.m, s.k}, dt, {s.lda, 1});
  e.b_md = memory::desc({s.k, s.n}, dt, {s.b_stride_k, s.b_stride_n});
  e.c_md = memory::desc({s.m, s.n}, memory::data_type::f32, {s.ldc ? s.ldc : s.n, 1});
  try {
    dnnl::matmul::desc d(e.a_md, e.b_md, e.c_md);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
    }
    dnnl::matmul::primitive_desc pd(d, attr, engine_);
    e.scratch_md = pd.scratchpad_desc();
    e.prim = dnnl::matmul(pd);
  } catch (const dnnl::error& err) {
    throw InvalidArgument("oneDNN cannot create a " + std::string(to_string(s.dtype)) + " matmul " +
                          std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                          " on this CPU (" + err.what() + ")" +
                          (s.dtype == DType::bf16 ? "; bf16 matmuls need AVX512-BF16 or AMX: this CPU's bf16 calls multiply fp32 operands" : ""));
  }
  if (e.scratch_md.get_size() > scratch_bytes_) {
    scratch_bytes_ = e.scratch_md.get_size();
    for (auto& buf : scratch_) buf.resize(scratch_bytes_ + 64);
  }
  prims_.emplace(s, std::move(e));
}

void MatmulCache::reserve_streams(int threads) {
  while (static_cast<int>(streams_.size()) < threads) {
    streams_.emplace_back(engine_);
    scratch_.emplace_back(scratch_bytes_ + 64);
  }
}

void MatmulCache::run(const MatmulShape& s, const void* a, const void* b, float* c, int stream_index) {
  const Entry& e = prims_.find(s)->second;
  memory am(e.a_md, engine_, const_cast<void*>(a));
  memory bm(e.b_md, engine_, const_cast<void*>(b));
  memory cm(e.c_md, engine_, c);
  const auto i = static_cast<std::size_t>(stream_index);
  auto base = reinterpret_cast<std::uintptr_t>(scratch_[i].data());
  memory sm(e.scratch_md, engine_, reinterpret_cast<void*>((base + 63) & ~std::uintptr_t{63}));
  e.prim.execute(streams_[i], {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm},
                               {DNNL_ARG_SCRATCHPAD, sm}});
}

}  // namespace ringattn::kernels
