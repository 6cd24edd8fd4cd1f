// The integer block arithmetic (kernels/int_ops.hpp) on AVX2 (int_avx2.cpp, and AVX-512
// without VNNI, int_avx512.cpp): vpmaddubsw multiplies a
// group's unsigned codes by 4 activation bytes into int16 pair sums, added in int16 over as
// many groups as cannot overflow (q4_k: a 32-step sub-block, 8 x 3,810; q6_k: 2 groups,
// 2 x 16,002), then vpmaddwd applies the sub-block's scale (as an int16 pair) and sums into
// int32; q8_0's signed weights go through vpsignb / vpabsb (|q| <= 128 times |x| <= 127,
// twice, fits int16) and their sum is taken directly (the -128 * sum(x) correction of the
// unsigned form is not needed). The side sums' pairs use vpmaddwd as vpdpwssd would. Every
// integer is exact, so S is int_ops.hpp's; the fp32 steps are its own, so the bits are the
// portable loop's. Tiles of up to 4 rows over a quarter of the panel (8 columns) at a time.
// Internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/int_blocks.hpp"
#include "kernels/x86/int_codes_x86.hpp"

namespace ringattn::kernels {
namespace {

inline __m256i bcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Kind: 0 q8_0, 1 q4_k, 2 q6_k.
template <int M, int Kind>
void tile_avx2_m(const IntFormat& f, const IntRowsView& x, const std::uint32_t* w, std::int64_t blocks, const float* a,
                 std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  alignas(32) float acc[M][32];
  for (int i = 0; i < M; ++i)
    for (int c = 0; c < 32; ++c) acc[i][c] = a ? a[i * lda + c] : 0.0f;
  constexpr int kBlock = Kind == 0 ? 32 : 256, kExtra = Kind == 0 ? 1 : Kind == 1 ? 4 : 8;
  constexpr int kSubs = Kind == 1 ? 8 : 16, kPerSub = Kind == 1 ? 8 : 4, kChunk = Kind == 1 ? 8 : 2;
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint32_t* blk = w + b * f.block_words;
    const auto* codes = reinterpret_cast<const std::uint8_t*>(blk);
    const std::int8_t* q[M];
    const std::int32_t* e[M];
    for (int i = 0; i < M; ++i) {
      q[i] = x.q + i * x.ldq + b * kBlock;
      e[i] = x.extra + i * x.lde + b * kExtra;
    }
    for (int h = 0; h < 4; ++h) {  // columns 8h..8h+7
      __m256i s[M];
      for (int i = 0; i < M; ++i) s[i] = _mm256_setzero_si256();
      auto code = [&](int g) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + g * 128 + h * 32)); };
      if constexpr (Kind == 0) {
        const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
        for (int g = 0; g < 8; ++g) {
          const __m256i wq = _mm256_xor_si256(code(g), flip), wa = _mm256_abs_epi8(wq);
          for (int i = 0; i < M; ++i) {
            const __m256i p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(bcast4(q[i] + g * 4), wq));
            s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(p, ones));
          }
        }
      } else {
        const std::uint32_t* coef = blk + f.coef_at;
        if constexpr (Kind == 2)
          for (int p = 0; p < kExtra; ++p) {
            const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(coef + p * 32 + h * 8));
            for (int i = 0; i < M; ++i) s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(c, _mm256_set1_epi32(e[i][p])));
          }
        const auto* sc = reinterpret_cast<const std::int32_t*>(blk + f.sc_at);
        for (int j = 0; j < kSubs; ++j) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + j * 32 + h * 8));
          const __m256i sc16 = _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
          for (int g0 = j * kPerSub; g0 < (j + 1) * kPerSub; g0 += kChunk) {
            __m256i d16[M];
            for (int i = 0; i < M; ++i) d16[i] = _mm256_setzero_si256();
            for (int g = g0; g < g0 + kChunk; ++g) {
              const __m256i wc = code(g);
              for (int i = 0; i < M; ++i) d16[i] = _mm256_add_epi16(d16[i], _mm256_maddubs_epi16(wc, bcast4(q[i] + g * 4)));
            }
            for (int i = 0; i < M; ++i) s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(d16[i], sc16));
          }
        }
      }
      const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(blk + f.d_at) + h * 8);
      __m256 t[M];
      for (int i = 0; i < M; ++i) t[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(s[i]), d);
      if constexpr (Kind == 1) {  // T -= float(S2) * dmin
        const std::uint32_t* coef = blk + f.coef_at;
        for (int i = 0; i < M; ++i) s[i] = _mm256_setzero_si256();
        for (int p = 0; p < kExtra; ++p) {
          const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(coef + p * 32 + h * 8));
          for (int i = 0; i < M; ++i) s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(c, _mm256_set1_epi32(e[i][p])));
        }
        const __m256 dm = _mm256_loadu_ps(reinterpret_cast<const float*>(blk + f.dmin_at) + h * 8);
        for (int i = 0; i < M; ++i) t[i] = _mm256_sub_ps(t[i], _mm256_mul_ps(_mm256_cvtepi32_ps(s[i]), dm));
      }
      for (int i = 0; i < M; ++i) {
        const __m256 dx = _mm256_set1_ps(x.dx[i * x.ldd + b]);
        _mm256_store_ps(acc[i] + h * 8, _mm256_add_ps(_mm256_load_ps(acc[i] + h * 8), _mm256_mul_ps(t[i], dx)));
      }
    }
  }
  for (int i = 0; i < M; ++i) {
    float* yr = y + i * ldy;
    for (int c = 0; c < cols; ++c) yr[c] = add ? yr[c] + acc[i][c] : acc[i][c];
  }
}

template <int Kind>
void tile_kind(const IntFormat& f, const IntRowsView& x, int m, const std::uint32_t* w, std::int64_t blocks,
               const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  switch (m) {
    case 1: return tile_avx2_m<1, Kind>(f, x, w, blocks, a, lda, y, ldy, cols, add);
    case 2: return tile_avx2_m<2, Kind>(f, x, w, blocks, a, lda, y, ldy, cols, add);
    case 3: return tile_avx2_m<3, Kind>(f, x, w, blocks, a, lda, y, ldy, cols, add);
    default: return tile_avx2_m<4, Kind>(f, x, w, blocks, a, lda, y, ldy, cols, add);
  }
}

void tile_avx2(const IntFormat& f, const IntRowsView& x, int m, const std::uint32_t* w, std::int64_t blocks,
               const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  switch (f.dtype) {
    case DType::q8_0: return tile_kind<0>(f, x, m, w, blocks, a, lda, y, ldy, cols, add);
    case DType::q4_k: return tile_kind<1>(f, x, m, w, blocks, a, lda, y, ldy, cols, add);
    case DType::q6_k: return tile_kind<2>(f, x, m, w, blocks, a, lda, y, ldy, cols, add);
    case DType::f32:
    case DType::bf16:
    case DType::f16: break;  // not block formats: Linear sends only those
  }
}

}  // namespace
}  // namespace ringattn::kernels
