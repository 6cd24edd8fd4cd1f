// CRC32C: slicing-by-8 tables everywhere, three-stream SSE4.2 on x86-64.
//
// The three-stream scheme follows Mark Adler's crc32c.c: the buffer is cut into
// consecutive lanes of kLong (then kShort) bytes, each lane gets its own crc32
// dependency chain, and the lane CRCs are merged with
//   crc(a + b) = shift_by_len(b)(crc(a)) ^ crc(b),
// where shift_by_len is a linear operator over GF(2) applied through four 256-entry
// tables. All tables are built once, on first use, in a thread-safe static.
#include "net/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ringattn::net {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;  // Castagnoli, bit-reflected
constexpr std::size_t kLong = 8192;            // lane length of the long loop (bytes)
constexpr std::size_t kShort = 256;            // lane length of the short loop (bytes)

using ShiftTable = std::array<std::array<std::uint32_t, 256>, 4>;

std::uint32_t gf2_times(const std::array<std::uint32_t, 32>& mat, std::uint32_t vec) {
  std::uint32_t sum = 0;
  for (int i = 0; vec != 0; ++i, vec >>= 1)
    if (vec & 1u) sum ^= mat[static_cast<std::size_t>(i)];
  return sum;
}

std::array<std::uint32_t, 32> gf2_square(const std::array<std::uint32_t, 32>& mat) {
  std::array<std::uint32_t, 32> sq{};
  for (std::size_t n = 0; n < 32; ++n) sq[n] = gf2_times(mat, mat[n]);
  return sq;
}

// The operator that appends `len` zero bytes (len a power of two) to a raw CRC register.
std::array<std::uint32_t, 32> zeros_operator(std::size_t len) {
  std::array<std::uint32_t, 32> op{};  // one zero bit
  op[0] = kPoly;
  for (std::size_t n = 1; n < 32; ++n) op[n] = 1u << (n - 1);
  for (int i = 0; i < 3; ++i) op = gf2_square(op);  // 8 bits = one byte
  for (; len > 1; len >>= 1) op = gf2_square(op);
  return op;
}

ShiftTable shift_table(std::size_t len) {
  const auto op = zeros_operator(len);
  ShiftTable t{};
  for (std::uint32_t n = 0; n < 256; ++n)
    for (std::uint32_t k = 0; k < 4; ++k) t[k][n] = gf2_times(op, n << (8 * k));
  return t;
}

struct Tables {
  std::array<std::array<std::uint32_t, 256>, 8> slice{};  // slicing-by-8
  ShiftTable long_shift, short_shift;

  Tables() : long_shift(shift_table(kLong)), short_shift(shift_table(kShort)) {
    for (std::uint32_t n = 0; n < 256; ++n) {
      std::uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
      slice[0][n] = c;
    }
    for (std::uint32_t n = 0; n < 256; ++n)
      for (std::size_t k = 1; k < 8; ++k)
        slice[k][n] = (slice[k - 1][n] >> 8) ^ slice[0][slice[k - 1][n] & 0xFFu];
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);  // x86-64 and aarch64 Linux are little-endian
  return v;
}

#if defined(__x86_64__)
std::uint32_t shift(const ShiftTable& t, std::uint32_t crc) {
  return t[0][crc & 0xFFu] ^ t[1][(crc >> 8) & 0xFFu] ^ t[2][(crc >> 16) & 0xFFu] ^ t[3][crc >> 24];
}

// Three lanes of `lane` bytes each, one crc32 chain per lane, merged through `sh`.
__attribute__((target("sse4.2"))) std::uint64_t three_lanes(std::uint64_t c0, const unsigned char*& p, std::size_t& len,
                                                            std::size_t lane, const ShiftTable& sh) {
  while (len >= 3 * lane) {
    std::uint64_t c1 = 0, c2 = 0;
    const unsigned char* end = p + lane;
    do {
      c0 = _mm_crc32_u64(c0, load_le64(p));
      c1 = _mm_crc32_u64(c1, load_le64(p + lane));
      c2 = _mm_crc32_u64(c2, load_le64(p + 2 * lane));
      p += 8;
    } while (p < end);
    c0 = shift(sh, static_cast<std::uint32_t>(c0)) ^ c1;
    c0 = shift(sh, static_cast<std::uint32_t>(c0)) ^ c2;
    p += 2 * lane;
    len -= 3 * lane;
  }
  return c0;
}

__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(std::uint32_t crc, const unsigned char* p,
                                                             std::size_t len) {
  const Tables& tab = tables();
  std::uint64_t c0 = ~crc;
  while (len != 0 && (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0) {
    c0 = _mm_crc32_u8(static_cast<std::uint32_t>(c0), *p++);
    --len;
  }
  c0 = three_lanes(c0, p, len, kLong, tab.long_shift);
  c0 = three_lanes(c0, p, len, kShort, tab.short_shift);
  for (; len >= 8; len -= 8, p += 8) c0 = _mm_crc32_u64(c0, load_le64(p));
  for (; len != 0; --len) c0 = _mm_crc32_u8(static_cast<std::uint32_t>(c0), *p++);
  return ~static_cast<std::uint32_t>(c0);
}

bool cpu_has_sse42() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return has;
}
#endif

}  // namespace

std::uint32_t crc32c_generic(std::uint32_t crc, std::span<const std::byte> data) {
  const auto& t = tables().slice;
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

bool crc32c_is_hardware() {
#if defined(__x86_64__)
  return cpu_has_sse42();
#else
  return false;
#endif
}

std::uint32_t crc32c(std::uint32_t crc, std::span<const std::byte> data) {
#if defined(__x86_64__)
  if (cpu_has_sse42())
    return crc32c_sse42(crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
#endif
  return crc32c_generic(crc, data);
}

}  // namespace ringattn::net
