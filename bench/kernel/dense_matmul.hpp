// The roofline of `bench kernel`: one bare oneDNN matmul per shape, C[m, n] (fp32) =
// A[m, k] x B[k, n], all three dense and row-major — the layout oneDNN is fastest on, made
// straight from oneDNN's API (not through the kernel's primitive cache), so the baseline
// owes nothing to the code it judges. The primitive is made once, for `threads` threads
// (oneDNN fixes its parallel decomposition at creation), and only executed when timed.
#pragma once

#include <cstdint>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "ringattn/error.hpp"
#include "ringattn/types.hpp"

namespace ringattn::bench {

class DenseMatmul {
 public:
  DenseMatmul() = default;
  DenseMatmul(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype, int threads);
  void run(const void* a, const void* b, float* c);

 private:
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::memory::desc a_, b_, c_;
  dnnl::matmul prim_;
};

}  // namespace ringattn::bench
