// The connection handshake: HELLO (who I am, what job) then AUTH (proof of the shared
// secret), mutual, on every connection. Pure functions; the socket side is in tcp/.
//
// Sequence:
//   1. the initiator (the dialling rank) sends HELLO{ring id, rank, world, link, job shape,
//      fresh 32-byte nonce}; the acceptor answers a well-formed HELLO with its own, and
//      says nothing at all to a connection that does not start with one;
//   2. the initiator proves first: AUTH = HMAC-SHA256(secret, label | role | HELLO_initiator
//      | HELLO_acceptor); the acceptor checks it in constant time and only then sends its
//      own proof, so a client without the secret never receives one (no offline guessing
//      from an acceptor's answer); on failure it sends ERROR(auth) and drops the
//      connection;
//   3. with both sides authenticated, each compares the HELLOs (compare_hello); a
//      disagreement (ring id, world, rank, job shape) is a configuration error of the
//      ring: ERROR(mismatch, "<field> differs ...") and both sides fail.
// A side that receives ERROR instead of the next expected frame reports the peer's text.
// With TLS (net/tcp/tls.hpp) all of this runs inside the TLS session.
//
// Threat model — plain TCP (the default). The handshake AUTHENTICATES PEERS: a process
// that does not hold the ring's shared secret cannot complete a connection, in either
// direction, so it can neither feed blocks into the ring nor receive them, and it cannot
// make a ring fail: an acceptor drops connections that do not prove the secret (each
// under its own short deadline, while it keeps serving the others), and only an
// authenticated peer's disagreement fails the ring. The proof binds both fresh nonces (no
// replay of a recorded handshake), the role of the prover (no reflecting a proof back at
// its sender) and both HELLOs (no splicing of job parameters). The secret never travels;
// HMAC is OpenSSL's. HELLO fields (ring id, ranks, world size, job shape) are not secret.
// It does NOT ENCRYPT OR INTEGRITY-PROTECT TENSORS: after the handshake, frames travel in
// clear and the CRC32C catches accidents, not attackers: someone on the path can read the
// tensors, rewrite a block and its CRC, or hijack an established TCP connection. A
// passive observer of a handshake can test guesses of a weak secret offline: secrets are
// at least 16 bytes (load_secret refuses shorter ones; generate_secret() makes 32).
//
// Threat model — TLS (--tls). Every connection is TLS 1.3 keyed by a PSK derived from the
// secret, with an ephemeral (EC)DHE exchange: tensors and frames are encrypted and
// integrity-protected (AES-GCM), so an on-path attacker can neither read nor change them
// undetected, nor hijack a connection; traffic recorded today stays secret if the token
// leaks later (forward secrecy). What remains: anyone who can reach a port can open
// connections (each costs a handshake deadline and a slot of 64), and traffic analysis
// (sizes, timing) is not hidden. In both modes the token is the root of trust: guard the
// token file (mode 0600) like an ssh key.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "net/crypto.hpp"
#include "net/wire.hpp"

namespace ringattn::net {

// What a connection is for, so an acceptor can file it.
enum class LinkKind : std::uint8_t {
  ring = 0,        // from a rank to its ring successor, made when the ring forms
  p2p = 1,         // from a rank to any other rank, made on its first send there
  rendezvous = 2,  // from a rank to the rendezvous (which speaks as rank 0)
  control = 3,     // from a client (ringattn submit/status) to a daemon's control port
};
std::string_view to_string(LinkKind k);

// compare_hello's expected_rank for an acceptor that takes any rank of the ring.
inline constexpr std::uint32_t kAnyRank = 0xFFFFFFFFu;

inline constexpr std::size_t kNonceBytes = 32;

// The HELLO payload (kHelloBytes, little-endian, byte by byte):
//   0 ring_id u64 | 8 rank u32 | 12 world u32 | 16 link u8 | 17 reserved u8 | 18 reserved u16
//   20 the caller's limit fields, 5 x u32 (LinkLimits::fields)
//   40 max_payload u64 | 48 options_digest u64 | 56 nonce[32]
struct Hello {
  std::uint64_t ring_id = 0;
  std::uint32_t rank = 0;
  std::uint32_t world = 0;
  LinkKind link = LinkKind::ring;
  LinkLimits limits;
  std::array<std::byte, kNonceBytes> nonce{};
};

// This side's HELLO (the nonce is drawn when the handshake runs).
inline Hello make_hello(std::uint64_t ring_id, int rank, int world, LinkKind link, const LinkLimits& limits) {
  Hello h;
  h.ring_id = ring_id;
  h.rank = static_cast<std::uint32_t>(rank);
  h.world = static_cast<std::uint32_t>(world);
  h.link = link;
  h.limits = limits;
  return h;
}

// The HELLO of a control connection: no ring, job or limits to agree on, only the token.
// The client speaks as rank 1 of 2, the daemon as rank 0 (constants: the proofs bind the
// nonces and the roles, which is all a control connection needs).
inline Hello control_hello(bool client) {
  return make_hello(0, client ? 1 : 0, 2, LinkKind::control, LinkLimits{});
}

using HelloBytes = std::array<std::byte, kHelloBytes>;

HelloBytes encode_hello(const Hello& h);

// Parses and checks a HELLO payload on its own (rank < world, known link, reserved
// zero). Returns "" or a message naming the bad field.
std::string try_decode_hello(std::span<const std::byte> bytes, Hello& out);

// Compares the peer's HELLO with ours: ring id, world size, link, the peer's rank (must
// be `expected_rank`, or any other rank than ours for kAnyRank) and every limit. Returns
// "" or one message naming the first field that differs with both values, e.g.
// "ring limit 'max_head_dim' differs: rank 1 has 128, peer rank 0 has 64".
std::string compare_hello(const Hello& ours, const Hello& theirs, std::uint32_t expected_rank);

enum class Role : std::uint8_t { initiator = 'I', acceptor = 'A' };

// The AUTH payload by which the `role` side of a connection proves it holds `secret`.
Digest256 auth_proof(std::span<const std::byte> secret, Role role, std::span<const std::byte> initiator_hello,
                     std::span<const std::byte> acceptor_hello);

}  // namespace ringattn::net
