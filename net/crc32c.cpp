// CRC32C: slicing-by-8 tables everywhere; on x86-64 the SSE4.2 crc32 instruction for
// short buffers and carry-less multiplication (PCLMULQDQ) folding for long ones.
//
// Why folding: one crc32 instruction per cycle caps a single dependency chain near
// 8 bytes/cycle minus its 3-cycle latency (~7 GB/s) and even three interleaved chains
// near 20 GB/s, which on a multi-GB/s stream is a fifth of the receiving core. Folding
// (Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ") has no such
// chain: four 128-bit accumulators each absorb 16 bytes of every 64; an accumulator X
// moves D bits forward as clmul(X.lo, k_lo) ^ clmul(X.hi, k_hi) where, in the
// bit-reflected domain, k_lo = reflect32(x^(D+31) mod P) and k_hi = reflect32(x^(D-33)
// mod P). The folded 128 bits are congruent to the message, so two crc32 instructions
// finish it and the tail continues with crc32. The initial CRC enters by XOR into the
// first 4 bytes (the register is XORed into the data LSB first). The tests compare every
// length and alignment against the table version.
#include "net/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ringattn::net {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;  // Castagnoli, bit-reflected

using SliceTables = std::array<std::array<std::uint32_t, 256>, 8>;

const SliceTables& slice_tables() {
  static const SliceTables t = [] {
    SliceTables s{};
    for (std::uint32_t n = 0; n < 256; ++n) {
      std::uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
      s[0][n] = c;
    }
    for (std::uint32_t n = 0; n < 256; ++n)
      for (std::size_t k = 1; k < 8; ++k) s[k][n] = (s[k - 1][n] >> 8) ^ s[0][s[k - 1][n] & 0xFFu];
    return s;
  }();
  return t;
}

std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);  // x86-64 and aarch64 Linux are little-endian
  return v;
}

#if defined(__x86_64__)
constexpr std::size_t kFoldMinBytes = 256;  // below this, folding's set-up does not pay

// x^n mod P in normal (most significant first) bit order, P = 0x1EDC6F41.
std::uint32_t xpow_mod(int n) {
  std::uint64_t r = 1;
  for (int i = 0; i < n; ++i) {
    r <<= 1;
    if (r & (std::uint64_t{1} << 32)) r ^= 0x11EDC6F41ull;
  }
  return static_cast<std::uint32_t>(r);
}

std::uint32_t reflect32(std::uint32_t v) {
  std::uint32_t r = 0;
  for (int i = 0; i < 32; ++i)
    if ((v >> i) & 1u) r |= 1u << (31 - i);
  return r;
}

// The pair of multipliers that moves a 128-bit accumulator `bits` forward.
struct FoldConstants {
  long long lo, hi;
  explicit FoldConstants(int bits)
      : lo(static_cast<long long>(reflect32(xpow_mod(bits + 31)))),
        hi(static_cast<long long>(reflect32(xpow_mod(bits - 33)))) {}
};

__attribute__((target("sse4.2,pclmul"))) __m128i fold(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

__attribute__((target("sse4.2"))) __m128i load128(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(std::uint32_t crc, const unsigned char* p,
                                                             std::size_t len) {
  std::uint64_t c = ~crc;
  for (; len >= 8; len -= 8, p += 8) c = _mm_crc32_u64(c, load_le64(p));
  for (; len != 0; --len) c = _mm_crc32_u8(static_cast<std::uint32_t>(c), *p++);
  return ~static_cast<std::uint32_t>(c);
}

// The last 128-bit accumulator `x`, then the remaining `len` bytes at `p`.
__attribute__((target("sse4.2,pclmul"))) std::uint32_t finish_fold(__m128i x, const unsigned char* p, std::size_t len) {
  static const FoldConstants k128(128);
  const __m128i f128 = _mm_set_epi64x(k128.hi, k128.lo);
  for (; len >= 16; p += 16, len -= 16) x = fold(x, f128, load128(p));
  std::uint64_t c = _mm_crc32_u64(0, static_cast<std::uint64_t>(_mm_cvtsi128_si64(x)));
  c = _mm_crc32_u64(c, static_cast<std::uint64_t>(_mm_extract_epi64(x, 1)));
  return crc32c_sse42(~static_cast<std::uint32_t>(c), p, len);
}

// Requires len >= 64.
__attribute__((target("sse4.2,pclmul"))) std::uint32_t crc32c_fold128(std::uint32_t crc, const unsigned char* p,
                                                                   std::size_t len) {
  static const FoldConstants k512(512), k128(128);
  const __m128i f512 = _mm_set_epi64x(k512.hi, k512.lo);
  const __m128i f128 = _mm_set_epi64x(k128.hi, k128.lo);
  __m128i x0 = _mm_xor_si128(load128(p), _mm_cvtsi32_si128(static_cast<int>(~crc)));
  __m128i x1 = load128(p + 16), x2 = load128(p + 32), x3 = load128(p + 48);
  for (p += 64, len -= 64; len >= 64; p += 64, len -= 64) {
    x0 = fold(x0, f512, load128(p));
    x1 = fold(x1, f512, load128(p + 16));
    x2 = fold(x2, f512, load128(p + 32));
    x3 = fold(x3, f512, load128(p + 48));
  }
  return finish_fold(fold(fold(fold(x0, f128, x1), f128, x2), f128, x3), p, len);
}

#define RINGATTN_TARGET_AVX512_CLMUL __attribute__((target("sse4.2,pclmul,avx512f,vpclmulqdq")))

RINGATTN_TARGET_AVX512_CLMUL __m512i load(const unsigned char* p) { return _mm512_loadu_si512(p); }

RINGATTN_TARGET_AVX512_CLMUL __m512i fold(__m512i z, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z, k, 0x00), _mm512_clmulepi64_epi128(z, k, 0x11), next,
                                   0x96);  // a ^ b ^ c
}

// The same folding on 512-bit registers: four accumulators of four 128-bit lanes each
// absorb 256 bytes per step. Requires len >= 256.
RINGATTN_TARGET_AVX512_CLMUL std::uint32_t crc32c_fold512(std::uint32_t crc, const unsigned char* p, std::size_t len) {
  static const FoldConstants k2048(2048), k512(512), k384(384), k256(256), k128(128);
  // (_mm512_set_epi64 rather than the broadcast/extract intrinsics: GCC 12's versions
  // of those trip -Wuninitialized inside its own headers.)
  const __m512i f2048 = _mm512_set_epi64(k2048.hi, k2048.lo, k2048.hi, k2048.lo, k2048.hi, k2048.lo, k2048.hi, k2048.lo);
  const __m512i f512 = _mm512_set_epi64(k512.hi, k512.lo, k512.hi, k512.lo, k512.hi, k512.lo, k512.hi, k512.lo);
  __m512i z0 = _mm512_xor_si512(load(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  __m512i z1 = load(p + 64), z2 = load(p + 128), z3 = load(p + 192);
  for (p += 256, len -= 256; len >= 256; p += 256, len -= 256) {
    z0 = fold(z0, f2048, load(p));
    z1 = fold(z1, f2048, load(p + 64));
    z2 = fold(z2, f2048, load(p + 128));
    z3 = fold(z3, f2048, load(p + 192));
  }
  z3 = fold(fold(fold(z0, f512, z1), f512, z2), f512, z3);
  // Lanes 0..2 move 384, 256 and 128 bits forward onto lane 3.
  alignas(64) __m128i lane[4];
  _mm512_store_si512(lane, z3);
  const __m128i x = fold(lane[0], _mm_set_epi64x(k384.hi, k384.lo),
                         fold(lane[1], _mm_set_epi64x(k256.hi, k256.lo),
                              fold(lane[2], _mm_set_epi64x(k128.hi, k128.lo), lane[3])));
  return finish_fold(x, p, len);
}

struct CpuCrc {
  bool sse42 = false, pclmul = false, vpclmul = false;
  CpuCrc() {
    __builtin_cpu_init();
    sse42 = __builtin_cpu_supports("sse4.2") != 0;
    pclmul = sse42 && __builtin_cpu_supports("pclmul") != 0;
    vpclmul = pclmul && __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("vpclmulqdq") != 0;
  }
};

const CpuCrc& cpu() {
  static const CpuCrc c;
  return c;
}
#endif

}  // namespace

std::uint32_t crc32c_generic(std::uint32_t crc, std::span<const std::byte> data) {
  const auto& t = slice_tables();
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  std::size_t len = data.size();
  std::uint32_t c = ~crc;
  for (; len >= 8; len -= 8, p += 8) {
    const std::uint64_t v = load_le64(p) ^ c;
    c = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
        t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
  }
  for (; len != 0; --len) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
  return ~c;
}

bool crc32c_has(Crc32cPath path) {
  switch (path) {
    case Crc32cPath::generic: return true;
#if defined(__x86_64__)
    case Crc32cPath::sse42: return cpu().sse42;
    case Crc32cPath::fold128: return cpu().pclmul;
    case Crc32cPath::fold512: return cpu().vpclmul;
#else
    default: return false;
#endif
  }
  return false;
}

std::uint32_t crc32c_with(Crc32cPath path, std::uint32_t crc, std::span<const std::byte> data) {
  if (!crc32c_has(path)) path = Crc32cPath::generic;
#if defined(__x86_64__)
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  switch (path) {
    case Crc32cPath::sse42: return crc32c_sse42(crc, p, data.size());
    case Crc32cPath::fold128: return data.size() >= 64 ? crc32c_fold128(crc, p, data.size()) : crc32c_sse42(crc, p, data.size());
    case Crc32cPath::fold512:
      return data.size() >= 256 ? crc32c_fold512(crc, p, data.size()) : crc32c_sse42(crc, p, data.size());
    case Crc32cPath::generic: break;
  }
#endif
  return crc32c_generic(crc, data);
}

Crc32cPath crc32c_best_path(std::size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= kFoldMinBytes && cpu().vpclmul) return Crc32cPath::fold512;
  if (bytes >= kFoldMinBytes && cpu().pclmul) return Crc32cPath::fold128;
  if (cpu().sse42) return Crc32cPath::sse42;
#endif
  (void)bytes;
  return Crc32cPath::generic;
}

std::uint32_t crc32c(std::uint32_t crc, std::span<const std::byte> data) {
  return crc32c_with(crc32c_best_path(data.size()), crc, data);
}

}  // namespace ringattn::net
