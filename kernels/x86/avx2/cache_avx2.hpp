// AVX2 decode loops over a KV cache (the table entries cache_* of softmax_ops.hpp), the
// AVX-512 ones' shape in 8 lanes: the plain loops of kernels/cache_loops.hpp, compiled for
// AVX2, reduce every dot product horizontally and reload the output rows per key, which
// left AVX2 decode compute-bound (3.4-3.7x the time to stream the cache, Zen 4 with the
// ISA caps at AVX2). These reduce the dot products of 8 keys together (two rounds of
// hadd and one cross-lane add) and keep up to 4 heads x 16 output columns in registers
// across the keys of a tile. bf16 rows are widened in registers (a zero-extend and a
// shift), never through a buffer.
#pragma once

#include <cstdint>

namespace ringattn::kernels::avx2 {

void cache_scores_f32(const float* q, int G, const float* k, std::int64_t ld, int n, int d, float* s);
void cache_scores_bf16(const float* q, int G, const std::uint16_t* k, std::int64_t ld, int n, int d, float* s);
void cache_pv_f32(const float* p, int G, const float* v, std::int64_t ld, int n, int d, float* o);
void cache_pv_bf16(const float* p, int G, const std::uint16_t* v, std::int64_t ld, int n, int d, float* o);

}  // namespace ringattn::kernels::avx2
