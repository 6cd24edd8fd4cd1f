// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of frame payloads.
//
// The receiver checks every payload it reads, on the I/O thread, while the bytes are
// still in cache; at multi-GB/s line rates a byte-at-a-time CRC would cost more CPU than
// the socket itself. So x86-64 uses the SSE4.2 crc32 instruction on three independent
// streams (its latency is 3 cycles, its throughput 1 per cycle) and merges them with
// precomputed "append N zero bytes" operators; every other CPU, or an x86 without
// SSE4.2, uses slicing-by-8 tables. Both give identical results; the table version is
// the oracle in the tests.
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

// True if crc32c() uses the SSE4.2 instruction on this CPU.
bool crc32c_is_hardware();

}  // namespace ringattn::net
