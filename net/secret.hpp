// The ring's shared secret (see the threat model in handshake.hpp) and the randomness
// the handshake needs.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace ringattn::net {

inline constexpr const char* kTokenEnv = "RINGATTN_TOKEN";

// The secret from `token_file` if it is non-empty (trailing whitespace/newlines
// stripped; a warning if the file is readable by group or others), else from the
// environment variable RINGATTN_TOKEN. Throws InvalidArgument if neither yields a
// non-empty secret, naming both places. Logs a warning for secrets under 16 bytes.
std::string load_secret(const std::string& token_file = "");

// A fresh random secret (32 random bytes as 64 hex digits) for a launcher that starts
// every rank itself and hands it to them (e.g. through RINGATTN_TOKEN).
std::string generate_secret();

// Fills `out` from the kernel's CSPRNG (getrandom); throws NetworkError if it fails.
void fill_random(std::span<std::byte> out);

}  // namespace ringattn::net
