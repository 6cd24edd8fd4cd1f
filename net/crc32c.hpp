// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of frame payloads.
//
// The receiver checks every payload it reads, on the I/O thread, while the bytes are
// still in cache; at multi-GB/s line rates a slow CRC would cost more CPU than the socket
// itself. So x86-64 folds long buffers with carry-less multiplication (PCLMULQDQ) and
// finishes with the SSE4.2 crc32 instruction; every other CPU uses slicing-by-8 tables.
// All paths give identical results; the table version is the oracle in the tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace ringattn::net {

// Extends `crc` (the CRC of earlier bytes, 0 for none) over `data`, so
// crc32c(crc32c(0, a), b) == crc32c(0, a + b). Uses the fastest path of this CPU.
std::uint32_t crc32c(std::uint32_t crc, std::span<const std::byte> data);

inline std::uint32_t crc32c(std::span<const std::byte> data) { return crc32c(0, data); }
inline std::uint32_t crc32c(std::string_view s) {
  return crc32c(0, std::as_bytes(std::span(s.data(), s.size())));
}

// The portable slicing-by-8 version (the oracle of the tests).
std::uint32_t crc32c_generic(std::uint32_t crc, std::span<const std::byte> data);

// The implementations, so tests can hold each against the oracle and benchmarks can
// name the one in use. crc32c() picks crc32c_best_path(size).
enum class Crc32cPath : std::uint8_t {
  generic,  // slicing-by-8 tables
  sse42,    // the crc32 instruction, 8 bytes at a time
  fold128,  // PCLMULQDQ folding on 128-bit registers
  fold512,  // VPCLMULQDQ folding on 512-bit registers (AVX-512)
};
bool crc32c_has(Crc32cPath path);
Crc32cPath crc32c_best_path(std::size_t bytes);
// `path` if this CPU has it, else the generic one.
std::uint32_t crc32c_with(Crc32cPath path, std::uint32_t crc, std::span<const std::byte> data);

}  // namespace ringattn::net
