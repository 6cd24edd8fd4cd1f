// ringattn serve — the fields of the daemons' binary messages (peer_messages.hpp,
// generation.hpp): little-endian integers and floats, length-prefixed strings. A Reader
// never reads past its payload's end and names the message and its sender in every error.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ringattn/byte_order.hpp"
#include "ringattn/error.hpp"

namespace ringattn::serve::peer {

inline constexpr std::size_t kMaxText = 4096;  // bytes of one string field

// Appends fields to a payload.
struct Writer {
  std::vector<std::byte> out;
  template <class T>
  void put(T v) {
    out.resize(out.size() + sizeof(T));
    put_le(out.data() + out.size() - sizeof(T), v);
  }
  void u8(std::uint8_t v) { out.push_back(static_cast<std::byte>(v)); }
  void u32(std::uint32_t v) { put(v); }
  void i32(std::int32_t v) { put(static_cast<std::uint32_t>(v)); }
  void u64(std::uint64_t v) { put(v); }
  void i64(std::int64_t v) { put(static_cast<std::uint64_t>(v)); }
  void f32(float v) { put(std::bit_cast<std::uint32_t>(v)); }
  void f64(double v) { put(std::bit_cast<std::uint64_t>(v)); }
  void text(const std::string& s) {
    const std::size_t n = std::min(s.size(), kMaxText);
    u32(static_cast<std::uint32_t>(n));
    const auto* b = reinterpret_cast<const std::byte*>(s.data());
    out.insert(out.end(), b, b + n);
  }
};

// Reads fields of a peer's payload, never past its end: `what` names the message and its
// sender in the error.
struct Reader {
  std::span<const std::byte> in;
  std::string what;
  int from = 0;
  std::size_t at = 0;

  [[noreturn]] void bad(const std::string& why) const { throw NetworkError(what + " " + why, FailureCause::protocol, from); }
  const std::byte* take(std::size_t n) {
    if (in.size() - at < n) bad("ends at byte " + std::to_string(in.size()) + ", inside a field at " + std::to_string(at));
    const std::byte* p = in.data() + at;
    at += n;
    return p;
  }
  std::size_t left() const { return in.size() - at; }
  std::uint8_t u8() { return static_cast<std::uint8_t>(*take(1)); }
  std::uint32_t u32() { return get_le<std::uint32_t>(take(4)); }
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  std::uint64_t u64() { return get_le<std::uint64_t>(take(8)); }
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
  float f32() { return std::bit_cast<float>(u32()); }
  double f64() { return std::bit_cast<double>(u64()); }
  std::string text() {
    const std::uint32_t n = u32();
    if (n > kMaxText) bad("holds a string of " + std::to_string(n) + " bytes (at most " + std::to_string(kMaxText) + ")");
    const std::byte* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  void end() const {
    if (at != in.size()) bad("has " + std::to_string(in.size() - at) + " bytes after its last field");
  }
};

}  // namespace ringattn::serve::peer
