#include "dense_matmul.hpp"

#include <omp.h>

namespace ringattn::bench {

using dnnl::memory;

DenseMatmul::DenseMatmul(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype, int threads) {
  const int saved = omp_get_max_threads();  // oneDNN reads the OpenMP thread count at creation
  omp_set_num_threads(threads);
  const auto dt = dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  a_ = memory::desc({m, k}, dt, memory::format_tag::ab);
  b_ = memory::desc({k, n}, dt, memory::format_tag::ab);
  c_ = memory::desc({m, n}, memory::data_type::f32, memory::format_tag::ab);
  try {
    prim_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_, b_, c_), engine_));
  } catch (const dnnl::error& e) {
    omp_set_num_threads(saved);
    throw InvalidArgument("bench kernel: oneDNN cannot create a " + std::string(to_string(dtype)) + " matmul " +
                          std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " here (" + e.what() +
                          ")");
  }
  omp_set_num_threads(saved);
}

void DenseMatmul::run(const void* a, const void* b, float* c) {
  memory am(a_, engine_, const_cast<void*>(a)), bm(b_, engine_, const_cast<void*>(b)), cm(c_, engine_, c);
  prim_.execute(stream_, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
}

}  // namespace ringattn::bench
