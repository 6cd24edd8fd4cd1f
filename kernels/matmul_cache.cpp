#include "kernels/matmul_cache.hpp"

#include <omp.h>

#include <cstdint>
#include <string>

#include "ringattn/error.hpp"

namespace ringattn::kernels {

using dnnl::memory;

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
  e.a_md = memory::desc({s.m, s.k}, dt, {s.lda, 1});
  e.b_md = memory::desc({s.k, s.n}, dt, {s.b_stride_k, s.b_stride_n});
  e.c_md = memory::desc({s.m, s.n}, memory::data_type::f32, {s.n, 1});
  try {
    dnnl::matmul::desc d(e.a_md, e.b_md, e.c_md);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(d, attr, engine_);
    e.scratch_md = pd.scratchpad_desc();
    e.prim = dnnl::matmul(pd);
  } catch (const dnnl::error& err) {
    throw InvalidArgument("oneDNN cannot create a " + std::string(to_string(s.dtype)) + " matmul " +
                          std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                          " on this CPU (" + err.what() + ")" +
                          (s.dtype == DType::bf16 ? "; bf16 needs AVX-512 (avx512_core) or newer" : ""));
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
