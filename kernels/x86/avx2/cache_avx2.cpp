// AVX2 decode loops over a KV cache (kernels/x86/avx2/cache_avx2.hpp).
#include "kernels/x86/avx2/cache_avx2.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace ringattn::kernels::avx2 {
namespace {

constexpr int kBlock = 8;     // keys whose scores are computed and reduced together
constexpr int kMaxDim = 256;  // head_dim bound (kernels/cache_loops.hpp)
constexpr int kAhead = 64;    // rows prefetched ahead, into L2 (as the AVX-512 loops)

inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8(const std::uint16_t* x) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <class T>
inline void prefetch_rows(const T* base, std::int64_t ld, int rows, int bytes) {
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(base + r * ld) + b, _MM_HINT_T1);
}

// Lane j of the result = the sum of the 8 lanes of v[j].
inline __m256 reduce8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // per 128-bit half: keys 0-3, 4-7
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

template <class KT>
void scores(const float* q, int G, const KT* k, std::int64_t ld, int n, int d, float* s) {
  alignas(32) float kf[kBlock][kMaxDim];
  const int chunks = d / 8;
  for (int j0 = 0; j0 < n; j0 += kBlock) {
    const int nb = std::min(kBlock, n - j0);
    // This KV head's part of the rows, kAhead rows on (each head's pass fetches its own).
    prefetch_rows(k + (j0 + kAhead) * ld, ld, kBlock, d * static_cast<int>(sizeof(KT)));
    for (int jj = 0; jj < kBlock; ++jj)
      for (int c = 0; c < chunks; ++c)
        _mm256_store_ps(kf[jj] + 8 * c, jj < nb ? load8(k + (j0 + jj) * ld + 8 * c) : _mm256_setzero_ps());
    for (int g = 0; g < G; ++g) {
      const float* qg = q + static_cast<std::int64_t>(g) * d;
      __m256 acc[kBlock];
#pragma GCC unroll 8
      for (int jj = 0; jj < kBlock; ++jj) acc[jj] = _mm256_setzero_ps();
      for (int c = 0; c < chunks; ++c) {
        const __m256 qc = _mm256_loadu_ps(qg + 8 * c);
#pragma GCC unroll 8
        for (int jj = 0; jj < kBlock; ++jj) acc[jj] = _mm256_fmadd_ps(qc, _mm256_load_ps(kf[jj] + 8 * c), acc[jj]);
      }
      float* out = s + static_cast<std::int64_t>(g) * n + j0;
      const __m256 sum = reduce8(acc);
      if (nb == kBlock) {
        _mm256_storeu_ps(out, sum);
      } else {  // not vmaskmovps: its store form is slow on AMD's cores
        alignas(32) float tmp[kBlock];
        _mm256_store_ps(tmp, sum);
        std::memcpy(out, tmp, static_cast<std::size_t>(nb) * sizeof(float));
      }
    }
  }
}

// o[g0..g0+GN) x columns [c0, c0 + 8*NC) += the nb keys of a block of dense rows vf
// (stride kMaxDim), in registers (GN*NC + NC + 1 of the 16 ymm registers).
template <int GN, int NC>
void pv_block(const float* p, std::int64_t n, const float (*vf)[kMaxDim], int nb, int d, int g0, int c0, float* o) {
  // Every loop over g and c fully unrolled: otherwise GCC 12 keeps acc on the stack and
  // stores it back every key (measured: most of the loop's time).
  __m256 acc[GN][NC];
#pragma GCC unroll 4
  for (int g = 0; g < GN; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[g][c] = _mm256_loadu_ps(o + static_cast<std::int64_t>(g0 + g) * d + c0 + 8 * c);
  for (int j = 0; j < nb; ++j) {
    __m256 vv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) vv[c] = _mm256_load_ps(vf[j] + c0 + 8 * c);
#pragma GCC unroll 4
    for (int g = 0; g < GN; ++g) {
      const __m256 w = _mm256_broadcast_ss(p + static_cast<std::int64_t>(g0 + g) * n + j);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[g][c] = _mm256_fmadd_ps(w, vv[c], acc[g][c]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < GN; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) _mm256_storeu_ps(o + static_cast<std::int64_t>(g0 + g) * d + c0 + 8 * c, acc[g][c]);
}

// Four heads share a V load across 16 columns; fewer heads take 32 columns a pass.
template <int GN>
void pv_heads(const float* p, std::int64_t n, const float (*vf)[kMaxDim], int nb, int d, int g0, float* o) {
  constexpr int NC = GN >= 3 ? 2 : 4;
  for (int c0 = 0; c0 < d; c0 += 8 * NC) {
    switch (std::min(NC, (d - c0) / 8)) {
      case 4: pv_block<GN, (NC >= 4 ? 4 : NC)>(p, n, vf, nb, d, g0, c0, o); break;
      case 3: pv_block<GN, (NC >= 3 ? 3 : NC)>(p, n, vf, nb, d, g0, c0, o); break;
      case 2: pv_block<GN, 2>(p, n, vf, nb, d, g0, c0, o); break;
      default: pv_block<GN, 1>(p, n, vf, nb, d, g0, c0, o); break;
    }
  }
}

// The V rows of a block of keys are first copied (widened) into a dense buffer in L1 and
// the column passes read that: read in place, every pass would touch one cache line per
// row at the cache's row stride (kv_heads * head_dim elements, often exactly 4 KiB, so all
// rows fall in one L1 set), and pv took 4x as long as the scores.
constexpr int kPvRows = 32;

template <class VT>
void pv(const float* p, int G, const VT* v, std::int64_t ld, int n, int d, float* o) {
  alignas(32) float vf[kPvRows][kMaxDim];
  std::memset(o, 0, static_cast<std::size_t>(G) * static_cast<std::size_t>(d) * sizeof(float));
  const int chunks = d / 8;
  for (int j0 = 0; j0 < n; j0 += kPvRows) {
    const int nb = std::min(kPvRows, n - j0);
    prefetch_rows(v + (j0 + kAhead) * ld, ld, kPvRows, d * static_cast<int>(sizeof(VT)));
    for (int j = 0; j < nb; ++j)
      for (int c = 0; c < chunks; ++c) _mm256_store_ps(vf[j] + 8 * c, load8(v + (j0 + j) * ld + 8 * c));
    for (int g0 = 0; g0 < G; g0 += 4) {
      switch (std::min(4, G - g0)) {
        case 4: pv_heads<4>(p + j0, n, vf, nb, d, g0, o); break;
        case 3: pv_heads<3>(p + j0, n, vf, nb, d, g0, o); break;
        case 2: pv_heads<2>(p + j0, n, vf, nb, d, g0, o); break;
        default: pv_heads<1>(p + j0, n, vf, nb, d, g0, o); break;
      }
    }
  }
}

}  // namespace

void cache_scores_f32(const float* q, int G, const float* k, std::int64_t ld, int n, int d, float* s) {
  scores(q, G, k, ld, n, d, s);
}
void cache_scores_bf16(const float* q, int G, const std::uint16_t* k, std::int64_t ld, int n, int d, float* s) {
  scores(q, G, k, ld, n, d, s);
}
void cache_pv_f32(const float* p, int G, const float* v, std::int64_t ld, int n, int d, float* o) {
  pv(p, G, v, ld, n, d, o);
}
void cache_pv_bf16(const float* p, int G, const std::uint16_t* v, std::int64_t ld, int n, int d, float* o) {
  pv(p, G, v, ld, n, d, o);
}

}  // namespace ringattn::kernels::avx2
