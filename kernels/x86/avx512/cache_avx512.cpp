// AVX-512 decode loops over a KV cache (kernels/x86/avx512/cache_avx512.hpp).
#include "kernels/x86/avx512/cache_avx512.hpp"

#include <immintrin.h>

#include <algorithm>

namespace ringattn::kernels::avx512 {
namespace {

constexpr int kBlock = 16;    // keys whose scores are computed and reduced together
constexpr int kMaxDim = 256;  // head_dim bound (kernels/cache_loops.hpp)
constexpr int kAhead = 64;    // rows prefetched ahead (into L2: the L1 miss buffers stay free for the loads)

inline __m512 load16(const float* x) { return _mm512_loadu_ps(x); }
inline __m512 load16(const std::uint16_t* x) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <class T>
inline void prefetch_rows(const T* base, std::int64_t ld, int rows, int bytes) {
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(base + r * ld) + b, _MM_HINT_T1);
}

// Lane j of the result = the sum of the 16 lanes of v[j].
inline __m512 reduce16(const __m512* v) {
  __m512 w[8], u[4];
  for (int i = 0; i < 8; ++i)
    w[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)
    u[i] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0x44), _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0xEE));
  const __m512 z01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 z23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(z01, z23, 0x88), _mm512_shuffle_f32x4(z01, z23, 0xDD));
}

template <class KT>
void scores(const float* q, int G, const KT* k, std::int64_t ld, int n, int d, float* s) {
  alignas(64) float kf[kBlock][kMaxDim];
  const int chunks = d / 16;
  for (int j0 = 0; j0 < n; j0 += kBlock) {
    const int nb = std::min(kBlock, n - j0);
    // This KV head's part of the rows, kAhead rows on (each head's pass fetches its own).
    prefetch_rows(k + (j0 + kAhead) * ld, ld, kBlock, d * static_cast<int>(sizeof(KT)));
    for (int jj = 0; jj < kBlock; ++jj)
      for (int c = 0; c < chunks; ++c)
        _mm512_store_ps(kf[jj] + 16 * c,
                        jj < nb ? load16(k + (j0 + jj) * ld + 16 * c) : _mm512_setzero_ps());
    const __mmask16 keep = static_cast<__mmask16>((1u << nb) - 1u);
    for (int g = 0; g < G; ++g) {
      const float* qg = q + static_cast<std::int64_t>(g) * d;
      __m512 acc[kBlock];
      for (int jj = 0; jj < kBlock; ++jj) acc[jj] = _mm512_setzero_ps();
      for (int c = 0; c < chunks; ++c) {
        const __m512 qc = _mm512_loadu_ps(qg + 16 * c);
        for (int jj = 0; jj < kBlock; ++jj) acc[jj] = _mm512_fmadd_ps(qc, _mm512_load_ps(kf[jj] + 16 * c), acc[jj]);
      }
      _mm512_mask_storeu_ps(s + static_cast<std::int64_t>(g) * n + j0, keep, reduce16(acc));
    }
  }
}

// o[g0..g0+GN) x columns [c0, c0 + 16*NC) over all n keys, in registers.
template <int GN, int NC, class VT>
void pv_block(const float* p, int n, const VT* v, std::int64_t ld, int d, int g0, int c0, float* o) {
  __m512 acc[GN][NC];
  for (int g = 0; g < GN; ++g)
    for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int j = 0; j < n; ++j) {
    const VT* vr = v + j * ld + c0;
    if ((j & 7) == 0 && c0 == 0) prefetch_rows(v + (j + kAhead) * ld, ld, 8, d * static_cast<int>(sizeof(VT)));
    __m512 vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = load16(vr + 16 * c);
    for (int g = 0; g < GN; ++g) {
      const __m512 w = _mm512_set1_ps(p[static_cast<std::int64_t>(g0 + g) * n + j]);
      for (int c = 0; c < NC; ++c) acc[g][c] = _mm512_fmadd_ps(w, vv[c], acc[g][c]);
    }
  }
  for (int g = 0; g < GN; ++g)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(o + static_cast<std::int64_t>(g0 + g) * d + c0 + 16 * c, acc[g][c]);
}

template <int GN, class VT>
void pv_heads(const float* p, int n, const VT* v, std::int64_t ld, int d, int g0, float* o) {
  for (int c0 = 0; c0 < d; c0 += 64) {
    switch (std::min(4, (d - c0) / 16)) {
      case 4: pv_block<GN, 4>(p, n, v, ld, d, g0, c0, o); break;
      case 3: pv_block<GN, 3>(p, n, v, ld, d, g0, c0, o); break;
      case 2: pv_block<GN, 2>(p, n, v, ld, d, g0, c0, o); break;
      default: pv_block<GN, 1>(p, n, v, ld, d, g0, c0, o); break;
    }
  }
}

template <class VT>
void pv(const float* p, int G, const VT* v, std::int64_t ld, int n, int d, float* o) {
  for (int g0 = 0; g0 < G; g0 += 4) {
    switch (std::min(4, G - g0)) {
      case 4: pv_heads<4>(p, n, v, ld, d, g0, o); break;
      case 3: pv_heads<3>(p, n, v, ld, d, g0, o); break;
      case 2: pv_heads<2>(p, n, v, ld, d, g0, o); break;
      default: pv_heads<1>(p, n, v, ld, d, g0, o); break;
    }
  }
}


// bf16 rows without a widening pass: one 512-bit load holds 32 elements, element 2i in
// the low and 2i+1 in the high half of 32-bit lane i, so a shift gives the even elements
// and a mask the odd ones as fp32, exactly. The query (and the output) are split the same
// way once, and the products are summed in that order: the same dot product, no
// conversion buffer, every operand in a register.
inline __m512 even_bf16(__m512i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)); }
inline __m512 odd_bf16(__m512i x) {
  return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// Lanes [4L, 4L+4) of the result: the sums over 128-bit lane L of a0..a3.
inline __m512 reduce4_lanes(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 w0 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 w1 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  return _mm512_add_ps(_mm512_shuffle_ps(w0, w1, 0x44), _mm512_shuffle_ps(w0, w1, 0xEE));
}
// Lane 4j + h of the result: the full sum of a_h of key j, from reduce4_lanes of keys 0..3.
inline __m512 reduce4_keys(__m512 u0, __m512 u1, __m512 u2, __m512 u3) {
  const __m512 z01 = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xDD));
  const __m512 z23 = _mm512_add_ps(_mm512_shuffle_f32x4(u2, u3, 0x88), _mm512_shuffle_f32x4(u2, u3, 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(z01, z23, 0x88), _mm512_shuffle_f32x4(z01, z23, 0xDD));
}

void scores_bf16_split(const float* q, int G, const std::uint16_t* k, std::int64_t ld, int n, int d, float* s) {
  const int pairs = d / 32;  // 32 elements per load (d is a multiple of 16: a last half-chunk is masked)
  const int tail = d % 32;   // 0 or 16
  alignas(64) float qe[4][kMaxDim / 2], qo[4][kMaxDim / 2];
  alignas(64) float r[16];
  const int slice_bytes = d * 2;
  for (int g0 = 0; g0 < G; g0 += 4) {
    const int gn = std::min(4, G - g0);
    const int chunks = pairs + (tail ? 1 : 0);
    // q's even and odd elements, per chunk (2 permutes per 32 elements); lanes past d and
    // heads past G are 0, so a masked-off lane meets 0, never garbage.
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < chunks; ++c) {
        __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
        if (h < gn) {
          const float* qh = q + static_cast<std::int64_t>(g0 + h) * d + 32 * c;
          a = _mm512_loadu_ps(qh);
          b = c < pairs ? _mm512_loadu_ps(qh + 16) : _mm512_setzero_ps();
        }
        _mm512_store_ps(qe[h] + 16 * c, _mm512_permutex2var_ps(a, ev, b));
        _mm512_store_ps(qo[h] + 16 * c, _mm512_permutex2var_ps(a, od, b));
      }
    for (int j0 = 0; j0 < n; j0 += 4) {
      __m512 u[4];
      for (int jj = 0; jj < 4; ++jj) {
        const int j = j0 + jj;
        if (j >= n) {
          u[jj] = _mm512_setzero_ps();
          continue;
        }
        const std::uint16_t* kr = k + j * ld;
        if (g0 == 0)  // this KV head's part of the row, kAhead rows on (each head's pass fetches its own)
          for (int b = 0; b < slice_bytes; b += 64)
            _mm_prefetch(reinterpret_cast<const char*>(kr + kAhead * ld) + b, _MM_HINT_T1);
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int c = 0; c < chunks; ++c) {
          const __m512i x = (c < pairs) ? _mm512_loadu_si512(kr + 32 * c)
                                        : _mm512_maskz_loadu_epi16(0xFFFFu, kr + 32 * c);  // 16 elements
          const __m512 e = even_bf16(x), o = odd_bf16(x);
          for (int h = 0; h < 4; ++h) {
            a[h] = _mm512_fmadd_ps(e, _mm512_load_ps(qe[h] + 16 * c), a[h]);
            a[h] = _mm512_fmadd_ps(o, _mm512_load_ps(qo[h] + 16 * c), a[h]);
          }
        }
        u[jj] = reduce4_lanes(a[0], a[1], a[2], a[3]);
      }
      _mm512_store_ps(r, reduce4_keys(u[0], u[1], u[2], u[3]));
      const int jn = std::min(4, n - j0);
      for (int h = 0; h < gn; ++h)
        for (int jj = 0; jj < jn; ++jj) s[static_cast<std::int64_t>(g0 + h) * n + j0 + jj] = r[4 * jj + h];
    }
  }
}

// The same with AVX512-BF16's vdpbf16ps, on CPUs that have it (Zen 4 and later, Sapphire
// Rapids and later): one instruction multiplies 32 bf16 pairs and adds them in fp32, so
// the split of K into even and odd elements disappears. The query goes in as bf16, so this
// path serves only a q that bf16 holds exactly — which a bf16 call's q is (it travels as
// bf16); any other q takes the split path above. (vdpbf16ps treats subnormal inputs as 0;
// a subnormal bf16 is below 1.2e-38.)
#define RINGATTN_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

RINGATTN_BF16_TARGET
void scores_bf16_dp(const float* q, int G, const std::uint16_t* k, std::int64_t ld, int n, int d, float* s) {
  const int pairs = d / 32;
  const int tail = d % 32;  // 0 or 16
  const int chunks = pairs + (tail ? 1 : 0);
  alignas(64) __m512bh qb[4][kMaxDim / 32];
  alignas(64) float r[16];
  const int slice_bytes = d * 2;
  for (int g0 = 0; g0 < G; g0 += 4) {
    const int gn = std::min(4, G - g0);
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < chunks; ++c) {
        __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
        if (h < gn) {
          const float* qh = q + static_cast<std::int64_t>(g0 + h) * d + 32 * c;
          lo = _mm512_loadu_ps(qh);
          hi = c < pairs ? _mm512_loadu_ps(qh + 16) : _mm512_setzero_ps();
        }
        qb[h][c] = _mm512_cvtne2ps_pbh(hi, lo);  // exact: q is bf16 already
      }
    for (int j0 = 0; j0 < n; j0 += 4) {
      __m512 u[4];
      for (int jj = 0; jj < 4; ++jj) {
        const int j = j0 + jj;
        if (j >= n) {
          u[jj] = _mm512_setzero_ps();
          continue;
        }
        const std::uint16_t* kr = k + j * ld;
        if (g0 == 0)
          for (int b = 0; b < slice_bytes; b += 64)
            _mm_prefetch(reinterpret_cast<const char*>(kr + kAhead * ld) + b, _MM_HINT_T1);
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int c = 0; c < chunks; ++c) {
          const __m512i x = (c < pairs) ? _mm512_loadu_si512(kr + 32 * c)
                                        : _mm512_maskz_loadu_epi16(0xFFFFu, kr + 32 * c);  // 16 elements
          const __m512bh kb = reinterpret_cast<const __m512bh&>(x);
          for (int h = 0; h < 4; ++h) a[h] = _mm512_dpbf16_ps(a[h], kb, qb[h][c]);
        }
        u[jj] = reduce4_lanes(a[0], a[1], a[2], a[3]);
      }
      _mm512_store_ps(r, reduce4_keys(u[0], u[1], u[2], u[3]));
      const int jn = std::min(4, n - j0);
      for (int h = 0; h < gn; ++h)
        for (int jj = 0; jj < jn; ++jj) s[static_cast<std::int64_t>(g0 + h) * n + j0 + jj] = r[4 * jj + h];
    }
  }
}

// Whether every element of x is a bf16 value (its low 16 bits are 0).
bool bf16_exact(const float* x, int n) {
  __m512i low = _mm512_setzero_si512();
  const __m512i mask = _mm512_set1_epi32(0xFFFF);
  int i = 0;
  for (; i + 16 <= n; i += 16) low = _mm512_or_si512(low, _mm512_and_si512(_mm512_loadu_si512(x + i), mask));
  bool ok = _mm512_test_epi32_mask(low, low) == 0;
  for (; i < n && ok; ++i) {
    std::uint32_t u;
    __builtin_memcpy(&u, x + i, 4);
    ok = (u & 0xFFFFu) == 0;
  }
  return ok;
}

const bool kHasBf16Dot = __builtin_cpu_supports("avx512bf16");

// o[g0..g0+GN) x elements [32*c0, 32*(c0+NC)) over all n keys: even and odd elements in
// separate registers, interleaved back once at the end.
template <int GN, int NC>
void pv_bf16_block(const float* p, int n, const std::uint16_t* v, std::int64_t ld, int d, int g0, int c0, float* o) {
  __m512 ae[GN][NC], ao[GN][NC];
  for (int g = 0; g < GN; ++g)
    for (int c = 0; c < NC; ++c) ae[g][c] = ao[g][c] = _mm512_setzero_ps();
  const int slice_bytes = d * 2;
  for (int j = 0; j < n; ++j) {
    const std::uint16_t* vr = v + j * ld;
    if (g0 == 0 && c0 == 0)
      for (int b = 0; b < slice_bytes; b += 64)
        _mm_prefetch(reinterpret_cast<const char*>(vr + kAhead * ld) + b, _MM_HINT_T1);
    __m512 e[NC], od[NC];
    for (int c = 0; c < NC; ++c) {
      const __m512i x = _mm512_loadu_si512(vr + 32 * (c0 + c));
      e[c] = even_bf16(x);
      od[c] = odd_bf16(x);
    }
    for (int g = 0; g < GN; ++g) {
      const __m512 w = _mm512_set1_ps(p[static_cast<std::int64_t>(g0 + g) * n + j]);
      for (int c = 0; c < NC; ++c) {
        ae[g][c] = _mm512_fmadd_ps(w, e[c], ae[g][c]);
        ao[g][c] = _mm512_fmadd_ps(w, od[c], ao[g][c]);
      }
    }
  }
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int g = 0; g < GN; ++g)
    for (int c = 0; c < NC; ++c) {
      float* out = o + static_cast<std::int64_t>(g0 + g) * d + 32 * (c0 + c);
      _mm512_storeu_ps(out, _mm512_permutex2var_ps(ae[g][c], lo, ao[g][c]));
      _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(ae[g][c], hi, ao[g][c]));
    }
}

template <int GN>
void pv_bf16_heads(const float* p, int n, const std::uint16_t* v, std::int64_t ld, int d, int g0, float* o) {
  const int chunks = d / 32;
  for (int c0 = 0; c0 < chunks; c0 += 2) {
    if (chunks - c0 >= 2) pv_bf16_block<GN, 2>(p, n, v, ld, d, g0, c0, o);
    else pv_bf16_block<GN, 1>(p, n, v, ld, d, g0, c0, o);
  }
}

void pv_bf16_split(const float* p, int G, const std::uint16_t* v, std::int64_t ld, int n, int d, float* o) {
  for (int g0 = 0; g0 < G; g0 += 4) {
    switch (std::min(4, G - g0)) {
      case 4: pv_bf16_heads<4>(p, n, v, ld, d, g0, o); break;
      case 3: pv_bf16_heads<3>(p, n, v, ld, d, g0, o); break;
      case 2: pv_bf16_heads<2>(p, n, v, ld, d, g0, o); break;
      default: pv_bf16_heads<1>(p, n, v, ld, d, g0, o); break;
    }
  }
}

}  // namespace

void cache_scores_f32(const float* q, int G, const float* k, std::int64_t ld, int n, int d, float* s) {
  scores(q, G, k, ld, n, d, s);
}
void cache_scores_bf16(const float* q, int G, const std::uint16_t* k, std::int64_t ld, int n, int d, float* s) {
  if (kHasBf16Dot && bf16_exact(q, G * d)) scores_bf16_dp(q, G, k, ld, n, d, s);
  else scores_bf16_split(q, G, k, ld, n, d, s);
}
void cache_pv_f32(const float* p, int G, const float* v, std::int64_t ld, int n, int d, float* o) {
  pv(p, G, v, ld, n, d, o);
}
void cache_pv_bf16(const float* p, int G, const std::uint16_t* v, std::int64_t ld, int n, int d, float* o) {
  if (d % 32 == 0) pv_bf16_split(p, G, v, ld, n, d, o);
  else pv(p, G, v, ld, n, d, o);  // head dims 48, 80, 112: 16-wide chunks
}

}  // namespace ringattn::kernels::avx512
