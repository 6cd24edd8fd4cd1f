// AVX-512 decode loops over a KV cache (the table entries cache_* of softmax_ops.hpp):
// the plain loops of kernels/cache_loops.hpp leave two costs the compiler cannot remove,
// a 16-lane horizontal sum per dot product and the output rows reloaded per key. These
// compute 16 keys' dot products at once and reduce them together (a transpose-and-add
// tree, 45 instructions for 16 dot products), and keep up to 4 heads x 64 output columns
// in registers across the keys of a tile.
#pragma once

#include <cstdint>

namespace ringattn::kernels::avx512 {

void cache_scores_f32(const float* q, int G, const float* k, std::int64_t ld, int n, int d, float* s);
void cache_scores_bf16(const float* q, int G, const std::uint16_t* k, std::int64_t ld, int n, int d, float* s);
void cache_pv_f32(const float* p, int G, const float* v, std::int64_t ld, int n, int d, float* o);
void cache_pv_bf16(const float* p, int G, const std::uint16_t* v, std::int64_t ld, int n, int d, float* o);

}  // namespace ringattn::kernels::avx512
