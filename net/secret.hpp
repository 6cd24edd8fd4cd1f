// The ring's shared secret (see the threat model in handshake.hpp) and the randomness
// the handshake needs.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace ringattn::net {

inline constexpr const char* kTokenEnv = "RINGATTN_TOKEN";

// The secret from `token_file` if it is non-empty, else from the environment variable
// RINGATTN_TOKEN; trailing whitespace/newlines are stripped. Throws InvalidArgument,
// naming the source and saying how to fix it, if neither yields a secret, if the secret
// is shorter than 16 bytes, or if the token file is not a regular file, is accessible
// by group or others (like ssh's private keys: chmod 600), or is larger than 4 KiB.
std::string load_secret(const std::string& token_file = "");

// Checks a secret handed over by other means (a launcher's pipe): at least 16 bytes.
// Throws InvalidArgument naming `source`.
std::string checked_secret(std::string secret, const std::string& source);

// A short public fingerprint of a secret (16 hex digits of an HMAC keyed by it), so that
// a launcher can tell which rank holds a different token without seeing any token.
std::string secret_fingerprint(const std::string& secret);

// A fresh random secret (32 random bytes as 64 hex digits) for a launcher that starts
// every rank itself and hands it to them (e.g. through RINGATTN_TOKEN).
std::string generate_secret();

// Fills `out` from the kernel's CSPRNG (getrandom); throws NetworkError if it fails.
void fill_random(std::span<std::byte> out);

}  // namespace ringattn::net
