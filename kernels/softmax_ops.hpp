// ringattn kernels — the SIMD pieces of the online softmax, one table per ISA path.
//
// The matmuls of block attention are oneDNN's; what remains per score tile is a pass
// over each row (max, exp, sum, optional bf16 rounding of the probabilities) and a
// rescale-and-add of the output row; per backward tile one pass turning scores into P
// and dS. Those passes are these functions. Every ISA path
// implements the same table; the generic one is plain C++ and is the oracle the ISA
// tests compare against. Intrinsics live only under x86/avx512, x86/avx2, arm/neon.
#pragma once

#include <cstdint>

namespace ringattn::kernels {

// Folds one row of raw scores into the running (m, l) of that query row.
//   s[0..n): raw q·k scores of one query against n keys; only columns [lo, hi) are
//            visible (the mask, resolved by the caller to one range since positions
//            increase); 0 <= lo <= hi <= n.
//   scale:   softmax scale (> 0); m is kept in scaled units (max of scale * q·k).
//   p:       out, n probabilities exp(scale*s - m_new), exactly 0 outside [lo, hi);
//            written as fp32 (p_f32) or bf16 (p_bf16), whichever is non-null.
//            p_f32 may alias s (in place): each element is read before it is written.
// Updates m and l in place and returns alpha = exp(m_old - m_new), the factor the
// caller applies to the output row (1 if the row is still empty).
using OnlineRowFn = float (*)(const float* s, int n, int lo, int hi, float scale, float* m,
                              float* l, float* p_f32, std::uint16_t* p_bf16);

// o[0..n) = o * alpha + t
using RescaleAddFn = void (*)(float* o, const float* t, float alpha, int n);

// fp32 <-> bf16, round to nearest even (NaN stays NaN).
using ToBf16Fn = void (*)(const float* src, std::uint16_t* dst, std::int64_t n);
using FromBf16Fn = void (*)(const std::uint16_t* src, float* dst, std::int64_t n);

// One query row of the block backward (kernels/block_backward.cpp), in one pass over the
// visible columns [lo, hi) of s (raw q·k scores) and dp (raw dO·v):
//   p  = 2^(s·c − m2)              c = scale·log2(e), m2 = lse·log2(e): p = exp(scale·s − lse)
//   ds = (scale · p) · (dp − delta)
// and exactly 0 outside [lo, hi), so that no hidden pair reaches a product. fp32: p over
// s, ds over dp, in place. bf16 (p_bf16 and ds_bf16 non-null): both rounded to nearest
// even into those only (ds from the fp32 p); s and dp are then not written.
using GradRowFn = void (*)(float* s, float* dp, int n, int lo, int hi, float c, float m2, float scale, float delta,
                           std::uint16_t* p_bf16, std::uint16_t* ds_bf16);

// 2^x for a vector, used by tests to check each path's exp against the generic one.
using Exp2Fn = void (*)(const float* x, float* y, int n);

// True if any of x[0..n) is NaN or +-inf. The fold runs these over the query tile and
// K/V panel rows it has just copied (still in cache), so finding non-finite inputs
// costs an AND, an ADD and an OR per vector (kernels/non_finite.hpp).
using HasNonFiniteF32Fn = bool (*)(const float* x, std::int64_t n);
using HasNonFiniteBf16Fn = bool (*)(const std::uint16_t* x, std::int64_t n);

// Decode over a KV cache (kernels/cache_loops.hpp, the same source compiled per path):
// scores s[g*n + j] = q_g . k_j for the G query heads of one KV head against n cached
// keys k_j = k + j*ld; and o[g*d + e] = sum_j p[g*n + j] * v_j[e]. q, p, s, o fp32
// dense; K and V fp32 or bf16 rows read in place. d is a multiple of 16, at most 256.
using CacheScoresF32Fn = void (*)(const float* q, int G, const float* k, std::int64_t ld, int n, int d, float* s);
using CacheScoresBf16Fn = void (*)(const float* q, int G, const std::uint16_t* k, std::int64_t ld, int n, int d,
                                   float* s);
using CachePvF32Fn = void (*)(const float* p, int G, const float* v, std::int64_t ld, int n, int d, float* o);
using CachePvBf16Fn = void (*)(const float* p, int G, const std::uint16_t* v, std::int64_t ld, int n, int d,
                               float* o);

struct SoftmaxOps {
  const char* name;
  OnlineRowFn online_row;
  RescaleAddFn rescale_add;
  ToBf16Fn to_bf16;
  FromBf16Fn from_bf16;
  Exp2Fn exp2;
  HasNonFiniteF32Fn has_non_finite_f32;
  HasNonFiniteBf16Fn has_non_finite_bf16;
  CacheScoresF32Fn cache_scores_f32;
  CacheScoresBf16Fn cache_scores_bf16;
  CachePvF32Fn cache_pv_f32;
  CachePvBf16Fn cache_pv_bf16;
  GradRowFn grad_row;
};

// Each path's table; only those compiled for this target exist (see dispatch.cpp).
extern const SoftmaxOps kOpsGeneric;
extern const SoftmaxOps kOpsAvx2;
extern const SoftmaxOps kOpsAvx512;
extern const SoftmaxOps kOpsNeon;

}  // namespace ringattn::kernels
