// ringattn/byte_order.hpp — little-endian integers written and read one byte at a time, so a wire format never
// depends on the host's endianness, alignment or struct padding (net/'s frames, the
// daemons' messages, a program's own binary messages on the ring's message channel).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringattn {

template <typename T>
void put_le(std::byte* p, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>(static_cast<std::uint64_t>(v) >> (8 * i));
}

template <typename T>
T get_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= std::to_integer<std::uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace ringattn
