// The integer block arithmetic (kernels/int_ops.hpp) on AVX512-VNNI with AVX512-VBMI,
// straight from the packed panel blocks (kernels/quant_blocks.hpp): a group's 4 steps of
// step-major bytes become 4-step column codes with one byte permute (vpermb / vpermt2b), in
// registers, so no IntBlock is written and read back — a decode step reads each weight once
// and nothing else. The scales and coefficients are widened from the block's bytes as
// int_blocks.hpp's unpack_scales computes them; vnni_tile.hpp's tiles do the rest, so the
// integers, and so the bits, are those of every other path.
#include "kernels/int_blocks.hpp"
#include "kernels/x86/avx512_vnni/vnni_tile.hpp"
#include "kernels/x86/int_codes_x86.hpp"

namespace ringattn::kernels {
namespace {

// Byte permutes, output byte c * 4 + i (column c of 16, step i of a group) from: q8_0's steps
// 0-1 in the first source, 2-3 in the second (32 bytes a step; the high half's columns 16
// on); 16-byte steps (q4_k, q6_k nibbles): byte i * 16 + c; q6_k's 8-byte high-bit steps:
// byte i * 8 + c % 8. Constants (no code runs at load: the binary starts on any CPU).
struct Permute {
  alignas(64) std::uint8_t at[64];
};
constexpr Permute permute(int kind) {
  Permute p{};
  for (int c = 0; c < 16; ++c)
    for (int i = 0; i < 4; ++i) {
      const int src = kind <= 1 ? (i / 2) * 64 + (i % 2) * 32 + c + 16 * kind : kind == 2 ? i * 16 + c : i * 8 + c % 8;
      p.at[c * 4 + i] = static_cast<std::uint8_t>(src);
    }
  return p;
}
constexpr Permute kQ8Lo = permute(0), kQ8Hi = permute(1), kNibbles = permute(2), kHighBits = permute(3);
inline __m512i load(const Permute& p) { return _mm512_load_si512(p.at); }

// A packed panel block's numbers (q8_0: d | int8 [32][32]; q4_k: d | dmin | scale u8 [8][32]
// | min u8 [8][32] | nibbles [256][16]; q6_k: d | scale int8 [16][32] | nibbles [256][16] |
// high bits [256][8]).
// Bytes ahead of a group's codes fetched into L1 while it is multiplied: one thread's decode
// reads one stream, which the hardware prefetchers alone keep at a fraction of memory's rate
// (measured, Zen 4, one thread, a [16384, 2048] Q4_K matrix: 1.88 ms without, 1.07 at 2 KiB
// ahead, 0.61 at 4 KiB, 0.53 at 8 KiB; Q8_0 1.42 -> 1.25 ms).
constexpr int kAhead = 8192;

struct PackedSrc {
  const IntFormat& f;
  const std::uint32_t* blk;
  PackedSrc(const IntFormat& fmt, const std::uint32_t* b) : f(fmt), blk(b) {}
  const std::uint8_t* bytes(int word) const { return reinterpret_cast<const std::uint8_t*>(blk + word); }
  void codes(int g, __m512i& w0, __m512i& w1) const {
    if (f.dtype == DType::q8_0) {
      const std::uint8_t* q = bytes(32) + g * 128;
      _mm_prefetch(reinterpret_cast<const char*>(q + kAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + kAhead + 64), _MM_HINT_T0);
      const __m512i a = _mm512_loadu_si512(q), b = _mm512_loadu_si512(q + 64);
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      w0 = _mm512_xor_si512(_mm512_permutex2var_epi8(a, load(kQ8Lo), b), flip);
      w1 = _mm512_xor_si512(_mm512_permutex2var_epi8(a, load(kQ8Hi), b), flip);
      return;
    }
    _mm_prefetch(reinterpret_cast<const char*>(bytes(f.dtype == DType::q4_k ? 192 : 160) + g * 64 + kAhead), _MM_HINT_T0);
    const __m512i t = _mm512_permutexvar_epi8(load(kNibbles),
                                              _mm512_loadu_si512(bytes(f.dtype == DType::q4_k ? 192 : 160) + g * 64));
    const __m512i m = _mm512_set1_epi8(0x0F);
    w0 = _mm512_and_si512(t, m);
    w1 = _mm512_and_si512(_mm512_srli_epi16(t, 4), m);
    if (f.dtype == DType::q6_k) {  // bits 4-5: columns 8k..8k+7 hold bits 2k, 2k + 1 of their byte
      const __m512i h = _mm512_permutexvar_epi8(
          load(kHighBits), _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes(1184) + g * 32))));
      const __m512i three = _mm512_set1_epi8(3);
      const __m512i s0 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);  // columns 0-7: 0, 8-15: 2
      const __m512i s1 = _mm512_add_epi16(s0, _mm512_set1_epi16(4));                          // 16-23: 4, 24-31: 6
      w0 = _mm512_or_si512(w0, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(h, s0), three), 4));
      w1 = _mm512_or_si512(w1, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(h, s1), three), 4));
    }
  }
  static __m128i l16(const std::uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  void scales(int j, __m512i& s0, __m512i& s1) const {
    if (f.dtype == DType::q4_k) {
      const std::uint8_t* s = bytes(64) + j * 32;
      s0 = _mm512_cvtepu8_epi32(l16(s));
      s1 = _mm512_cvtepu8_epi32(l16(s + 16));
    } else {
      const std::uint8_t* s = bytes(32) + j * 32;
      s0 = _mm512_cvtepi8_epi32(l16(s));
      s1 = _mm512_cvtepi8_epi32(l16(s + 16));
    }
  }
  void coef(int p, __m512i& c0, __m512i& c1) const {
    __m512i* out[2] = {&c0, &c1};
    for (int h = 0; h < 2; ++h) {
      if (f.dtype == DType::q4_k) {  // min_2p | min_2p+1 << 16
        const std::uint8_t* m = bytes(128) + 2 * p * 32 + 16 * h;
        *out[h] = _mm512_or_si512(_mm512_cvtepu8_epi32(l16(m)), _mm512_slli_epi32(_mm512_cvtepu8_epi32(l16(m + 32)), 16));
      } else {  // (-32 sc_2p) & 0xFFFF | -32 sc_2p+1 << 16
        const std::uint8_t* s = bytes(32) + 2 * p * 32 + 16 * h;
        const __m512i a = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_cvtepi8_epi32(l16(s)), 5));
        const __m512i b = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_cvtepi8_epi32(l16(s + 32)), 5));
        *out[h] = _mm512_or_si512(_mm512_and_si512(a, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(b, 16));
      }
    }
  }
  __m512 d(int h) const { return _mm512_loadu_ps(reinterpret_cast<const float*>(blk) + 16 * h); }
  __m512 dmin(int h) const { return _mm512_loadu_ps(reinterpret_cast<const float*>(blk + 32) + 16 * h); }
};

void tile_scratch(const IntFormat& f, const IntRowsView& x, int m, const std::uint32_t* w, std::int64_t blocks,
                  const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  tile_vnni<ScratchSrc>(f, x, m, w, f.block_words, blocks, a, lda, y, ldy, cols, add);
}

}  // namespace

const IntOps kIntAvx512VnniVbmi = {.name = "avx512-vnni-vbmi", .rows = 4, .quantize = quantize_rows,
                                   .unpack = unpack_int_x86, .tile = tile_scratch, .packed = tile_vnni<PackedSrc>};

}  // namespace ringattn::kernels
