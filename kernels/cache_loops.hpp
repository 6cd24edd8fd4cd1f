// ringattn kernels — the two inner loops of decode attention over a KV cache, written
// once in plain C++ and compiled by every ISA path with its own flags (each path's
// softmax file includes this header), so the compiler vectorises them for AVX-512,
// AVX2, NEON or the generic target. No intrinsics: the loops are shaped so that the
// vector lanes never need a reassociated sum (16 independent partial sums per dot
// product, the output row as the vector in P·V).
//
// Decode is bound by memory, not FLOPs: a query row meets each cached key once, so the
// loops read K and V exactly once per KV head and group of query heads (the G query
// heads that share a KV head are computed together), straight from the cache's rows
// [rows, kv_heads, head_dim] at row stride ld — no packing copy, unlike prefill's fold.
#pragma once

#include <cstdint>
#include <cstring>

// Internal linkage on purpose: every ISA path's translation unit compiles its own copy
// with its own flags; a shared (inline, external) template would let the linker keep one
// copy for all paths — the AVX-512 one on a CPU without it, or the generic one for all.
namespace ringattn::kernels::cache_loops {
namespace {

inline float widen(float x) { return x; }
inline float widen(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rows fetched ahead. Each key row of one KV head is head_dim elements at stride ld; the
// loops do enough work per row that the out-of-order window alone keeps only a few rows in
// flight, which leaves decode bound by memory latency rather than bandwidth. A prefetch
// never faults, so running past the last row is harmless.
inline constexpr int kAhead = 8;
inline void prefetch_row(const void* row, int bytes) {
  for (int b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(row) + b);
}

inline constexpr int kLanes = 16;  // partial sums per dot product; head_dim is a multiple of 16
inline constexpr int kMaxDim = 256;

// s[g * n + j] = q_g · k_j for g < G, j < n. q: [G, d] fp32 dense; k_j = k + j * ld.
template <class KT>
void scores(const float* __restrict q, int G, const KT* __restrict k, std::int64_t ld, int n, int d,
            float* __restrict s) {
  alignas(64) float kf[kMaxDim];
  for (int j = 0; j < n; ++j) {
    const KT* kr = k + static_cast<std::int64_t>(j) * ld;
    prefetch_row(kr + kAhead * ld, d * static_cast<int>(sizeof(KT)));
    for (int e = 0; e < d; ++e) kf[e] = widen(kr[e]);
    for (int g = 0; g < G; ++g) {
      const float* qg = q + static_cast<std::int64_t>(g) * d;
      float acc[kLanes] = {};
      for (int e = 0; e < d; e += kLanes)
        for (int i = 0; i < kLanes; ++i) acc[i] += qg[e + i] * kf[e + i];
      // A tree of halvings (each one vector add), not 16 dependent scalar adds.
      for (int i = 0; i < 8; ++i) acc[i] += acc[i + 8];
      for (int i = 0; i < 4; ++i) acc[i] += acc[i + 4];
      for (int i = 0; i < 2; ++i) acc[i] += acc[i + 2];
      s[static_cast<std::int64_t>(g) * n + j] = acc[0] + acc[1];
    }
  }
}

// o[g * d + e] = sum_j p[g * n + j] * v_j[e] for g < G (o overwritten). v_j = v + j * ld.
template <class VT>
void weighted_sum(const float* __restrict p, int G, const VT* __restrict v, std::int64_t ld, int n, int d,
                  float* __restrict o) {
  alignas(64) float vf[kMaxDim];
  for (int i = 0; i < G * d; ++i) o[i] = 0;
  for (int j = 0; j < n; ++j) {
    const VT* vr = v + static_cast<std::int64_t>(j) * ld;
    prefetch_row(vr + kAhead * ld, d * static_cast<int>(sizeof(VT)));
    bool any = false;
    for (int g = 0; g < G; ++g) any |= p[static_cast<std::int64_t>(g) * n + j] != 0.0f;
    if (!any) continue;  // a key no query head weighs (masked, or underflowed)
    for (int e = 0; e < d; ++e) vf[e] = widen(vr[e]);
    for (int g = 0; g < G; ++g) {
      const float w = p[static_cast<std::int64_t>(g) * n + j];
      float* og = o + static_cast<std::int64_t>(g) * d;
      for (int e = 0; e < d; ++e) og[e] += w * vf[e];
    }
  }
}

}  // namespace
}  // namespace ringattn::kernels::cache_loops

// The four table entries of a path, defined in that path's own translation unit.
#define RINGATTN_CACHE_LOOPS(suffix)                                                                           \
  void cache_scores_f32_##suffix(const float* q, int G, const float* k, std::int64_t ld, int n, int d,       \
                                 float* s) {                                                                 \
    cache_loops::scores(q, G, k, ld, n, d, s);                                                               \
  }                                                                                                          \
  void cache_scores_bf16_##suffix(const float* q, int G, const std::uint16_t* k, std::int64_t ld, int n,     \
                                  int d, float* s) {                                                         \
    cache_loops::scores(q, G, k, ld, n, d, s);                                                               \
  }                                                                                                          \
  void cache_pv_f32_##suffix(const float* p, int G, const float* v, std::int64_t ld, int n, int d, float* o) { \
    cache_loops::weighted_sum(p, G, v, ld, n, d, o);                                                         \
  }                                                                                                          \
  void cache_pv_bf16_##suffix(const float* p, int G, const std::uint16_t* v, std::int64_t ld, int n, int d,  \
                              float* o) {                                                                    \
    cache_loops::weighted_sum(p, G, v, ld, n, d, o);                                                         \
  }
