// The few cryptographic primitives the transport uses, from OpenSSL 3's libcrypto:
// SHA-256, HMAC-SHA256 (RFC 2104) for the handshake's peer authentication, HKDF-SHA256
// (RFC 5869) to turn the shared secret into a TLS pre-shared key, and a constant-time
// comparison. Thin wrappers so that callers take spans and the OpenSSL headers stay here.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>

namespace ringattn::net {

using Digest256 = std::array<std::byte, 32>;

Digest256 sha256(std::span<const std::byte> data);

// HMAC-SHA256 over the concatenation of `parts` (so callers need not build one buffer).
Digest256 hmac_sha256(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts);

// HKDF-SHA256 (extract then expand) of `key` into out.size() bytes (at most 255 * 32).
// `key` must not be empty.
void hkdf_sha256(std::span<const std::byte> key, std::span<const std::byte> salt, std::span<const std::byte> info,
                 std::span<std::byte> out);

// Equality that takes the same time wherever the first difference is, so a MAC check
// leaks nothing about how many leading bytes an attacker guessed right.
bool constant_time_equal(std::span<const std::byte> a, std::span<const std::byte> b);

// The text of OpenSSL's thread-local error queue, which it then clears, for the message
// of an exception about a failed OpenSSL call ("no OpenSSL error text" if it is empty).
std::string openssl_errors();

}  // namespace ringattn::net
