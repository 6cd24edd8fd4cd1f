// The connection handshake: HELLO (who I am, what job) then AUTH (proof of the shared
// secret), mutual, on every connection. Pure functions; the socket side is in tcp/.
//
// Sequence (both sides act the same way, so neither waits on the other's decision):
//   1. each side sends HELLO{ring id, rank, world, link, job shape, fresh 32-byte nonce};
//   2. each side decodes the peer's HELLO and compares it with its own (compare_hello);
//      on a mismatch it sends ERROR("<which field differs>") and gives up;
//   3. each side sends AUTH = HMAC-SHA256(secret, label | role | HELLO_initiator | HELLO_acceptor);
//   4. each side checks the peer's AUTH in constant time; on failure it sends
//      ERROR("authentication failed") and gives up. A side that receives ERROR instead of
//      the next expected frame reports the peer's text.
//
// Threat model. The handshake AUTHENTICATES PEERS: a process that does not hold the ring's
// shared secret cannot complete a connection, in either direction, so it can neither feed
// blocks into the ring nor receive them. The proof binds both fresh nonces (no replay of a
// recorded handshake), the role of the prover (no reflecting a proof back at its sender)
// and both HELLOs (no splicing of job parameters). The secret never travels; HMAC is OpenSSL's.
// It does NOT ENCRYPT OR INTEGRITY-PROTECT TENSORS: after the handshake frames travel in
// clear, and the CRC32C catches accidents, not attackers. Someone who can read or modify
// traffic on the path can read the tensors or tamper with them, or hijack an established
// TCP connection. Run rings on a private network or inside WireGuard/IPsec when that
// matters. Anyone who can reach a listening port can make the job fail (denial of service)
// by presenting a bad HELLO; they cannot make it compute on their data. A captured
// handshake allows an offline guessing attack on a weak secret: use a random secret of
// at least 16 bytes (generate_secret() in secret.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "net/crypto.hpp"
#include "net/wire.hpp"

namespace ringattn::net {

// What a connection is for, so an acceptor can file it. Only the ring exists today; the
// all-to-all and decode schedules will add their own links.
enum class LinkKind : std::uint8_t { ring = 0 };  // from a rank to its ring successor

inline constexpr std::size_t kNonceBytes = 32;

// The HELLO payload (kHelloBytes, little-endian, byte by byte):
//   0 ring_id u64 | 8 rank u32 | 12 world u32 | 16 link u8 | 17 dtype u8 | 18 reserved u16
//   20 heads u32 | 24 kv_heads u32 | 28 head_dim u32 | 32 max_block_rows u32 | 36 reserved u32
//   40 tokens u64 | 48 options_digest u64 | 56 nonce[32]
struct Hello {
  std::uint64_t ring_id = 0;
  std::uint32_t rank = 0;
  std::uint32_t world = 0;
  LinkKind link = LinkKind::ring;
  JobShape shape;
  std::array<std::byte, kNonceBytes> nonce{};
};

using HelloBytes = std::array<std::byte, kHelloBytes>;

HelloBytes encode_hello(const Hello& h);

// Parses and checks a HELLO payload on its own (rank < world, known link and dtype,
// reserved zero). Returns "" or a message naming the bad field.
std::string try_decode_hello(std::span<const std::byte> bytes, Hello& out);

// Compares the peer's HELLO with ours: ring id, world size, link, the peer's rank
// (must be `expected_rank`) and every job shape field. Returns "" or one message naming
// the first field that differs with both values, e.g.
// "job shape field 'head_dim' differs: rank 1 has 128, peer rank 0 has 64".
std::string compare_hello(const Hello& ours, const Hello& theirs, std::uint32_t expected_rank);

enum class Role : std::uint8_t { initiator = 'I', acceptor = 'A' };

// The AUTH payload by which the `role` side of a connection proves it holds `secret`.
Digest256 auth_proof(std::span<const std::byte> secret, Role role, std::span<const std::byte> initiator_hello,
                     std::span<const std::byte> acceptor_hello);

}  // namespace ringattn::net
