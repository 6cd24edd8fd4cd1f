// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the peer authentication of the
// handshake. The project has no crypto library dependency; these run a few times per
// connection on a few hundred bytes, so a plain portable implementation is enough.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

namespace ringattn::net {

using Digest256 = std::array<std::byte, 32>;

class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::byte> data);
  void update(std::string_view s) { update(std::as_bytes(std::span(s.data(), s.size()))); }
  Digest256 finish();  // the object must not be updated afterwards

 private:
  void compress(const std::byte* block);
  std::array<std::uint32_t, 8> h_;
  std::array<std::byte, 64> buf_{};
  std::size_t buf_len_ = 0;
  std::uint64_t total_bytes_ = 0;
};

Digest256 sha256(std::span<const std::byte> data);

// HMAC-SHA256 over the concatenation of `parts` (so callers need not build one buffer).
Digest256 hmac_sha256(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts);

// Equality that takes the same time wherever the first difference is, so a MAC check
// leaks nothing about how many leading bytes an attacker guessed right.
bool constant_time_equal(std::span<const std::byte> a, std::span<const std::byte> b);

}  // namespace ringattn::net
