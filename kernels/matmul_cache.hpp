// ringattn kernels — oneDNN matmul primitives for the tile shapes of block attention.
//
// Creating a oneDNN primitive costs ~0.2-0.3 ms here, longer than a 64x256x128 tile
// matmul, so primitives are created once per distinct tile shape (full tiles plus the
// ragged last tile of each axis) *before* the parallel loop, and only looked up inside
// it. Strides are part of the shape: Q/K/V rows are read in place from the
// [rows, heads, head_dim] layout (row stride heads*head_dim), K as a transposed view.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "ringattn/types.hpp"

namespace ringattn::kernels {

// C[M,N] (fp32, row stride ldc, dense by default) = A[M,K] (row stride lda) x B[K,N] where B's element
// (k, n) lives at b[k * b_stride_k + n * b_stride_n]. A and B share `dtype`.
// a_transposed: A's element (m, k) lives at a[k * lda + m] instead (the backward's Pᵀ and
// dSᵀ, read in place from the row-major tiles). accumulate: C += A x B instead of C =.
struct MatmulShape {
  std::int64_t m, n, k;
  std::int64_t lda, b_stride_k, b_stride_n;
  DType dtype;
  bool a_transposed = false;
  bool accumulate = false;
  std::int64_t ldc = 0;  // C's row stride; 0: dense (n)

  auto tie() const { return std::tie(m, n, k, lda, b_stride_k, b_stride_n, dtype, a_transposed, accumulate, ldc); }
  bool operator<(const MatmulShape& o) const { return tie() < o.tie(); }
};

// Whether oneDNN may run bf16 matmuls on bf16 units in this process: its effective ISA
// (the CPU, capped by ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA) includes AVX512-BF16 or
// AMX, and it creates a brgemm bf16 matmul. Without them oneDNN 2.6 either has no bf16
// matmul at all (AVX2) or emulates one (plain AVX-512) at below its fp32 speed, so a bf16
// call then multiplies fp32 operands widened from bf16 instead. Decided once.
bool bf16_matmul_native();

// oneDNN's implementation of a tile matmul (64 x 512 x 128) with `operands`, e.g.
// "brg:avx512_core", "brg:avx512_core_amx", "gemm:jit"; "none (...)" if it has none.
std::string matmul_implementation(DType operands);

// oneDNN's effective ISA in this process, by its name in ONEDNN_MAX_CPU_ISA: "avx2",
// "avx512_core_bf16", "avx512_core_amx", ... (the CPU's, or less where that caps it).
std::string onednn_isa();

class MatmulCache {
 public:
  MatmulCache();

  // Creates the primitive for `s` if it is new, blocked for running on `threads`
  // threads (oneDNN fixes its parallel decomposition at creation; the kernel runs each
  // tile matmul on one thread). Not thread-safe: call before the parallel region.
  // Throws InvalidArgument if oneDNN cannot do this shape/dtype here.
  void prepare(const MatmulShape& s, int threads = 1);

  // C = A x B with the prepared primitive. Thread-safe for distinct `stream_index`
  // (one stream per OpenMP thread); noexcept in spirit: `s` must have been prepared.
  void run(const MatmulShape& s, const void* a, const void* b, float* c, int stream_index);

  // Ensures one stream per thread that may call run().
  void reserve_streams(int threads);

 private:
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a_md, b_md, c_md, scratch_md;
  };
  dnnl::engine engine_;
  std::map<MatmulShape, Entry> prims_;
  std::vector<dnnl::stream> streams_;
  // oneDNN's library-managed scratchpad is shared between primitives and not safe for
  // concurrent execution in this build, so each thread brings its own (user mode).
  std::vector<std::vector<std::byte>> scratch_;
  std::size_t scratch_bytes_ = 0;
};

}  // namespace ringattn::kernels
