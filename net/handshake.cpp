// HELLO encoding/comparison and the AUTH proof (protocol in handshake.hpp).
#include "net/handshake.hpp"

#include <algorithm>
#include <string_view>

#include "ringattn/byte_order.hpp"

namespace ringattn::net {
namespace {

constexpr std::string_view kAuthLabel = "ringattn-auth-v1";

std::string bad(std::string_view f, std::uint64_t v, std::string_view why) {
  return "HELLO field '" + std::string(f) + "' = " + std::to_string(v) + " " + std::string(why);
}

}  // namespace

std::string_view to_string(LinkKind k) {
  switch (k) {
    case LinkKind::ring: return "ring";
    case LinkKind::p2p: return "p2p";
    case LinkKind::rendezvous: return "rendezvous";
    case LinkKind::control: return "control";
  }
  return "?";
}

HelloBytes encode_hello(const Hello& h) {
  HelloBytes b{};
  put_le<std::uint64_t>(b.data() + 0, h.ring_id);
  put_le<std::uint32_t>(b.data() + 8, h.rank);
  put_le<std::uint32_t>(b.data() + 12, h.world);
  put_le<std::uint8_t>(b.data() + 16, static_cast<std::uint8_t>(h.link));
  for (std::size_t i = 0; i < kLimitFields; ++i) put_le<std::uint32_t>(b.data() + 20 + 4 * i, h.limits.fields[i]);
  put_le<std::uint64_t>(b.data() + 40, h.limits.max_payload);
  put_le<std::uint64_t>(b.data() + 48, h.limits.options_digest);
  std::copy(h.nonce.begin(), h.nonce.end(), b.begin() + 56);
  return b;
}

std::string try_decode_hello(std::span<const std::byte> b, Hello& out) {
  if (b.size() != kHelloBytes) return bad("size", b.size(), "but a HELLO is " + std::to_string(kHelloBytes) + " bytes");
  Hello h;
  h.ring_id = get_le<std::uint64_t>(b.data() + 0);
  h.rank = get_le<std::uint32_t>(b.data() + 8);
  h.world = get_le<std::uint32_t>(b.data() + 12);
  const auto link = get_le<std::uint8_t>(b.data() + 16);
  for (std::size_t i = 0; i < kLimitFields; ++i) h.limits.fields[i] = get_le<std::uint32_t>(b.data() + 20 + 4 * i);
  h.limits.max_payload = get_le<std::uint64_t>(b.data() + 40);
  h.limits.options_digest = get_le<std::uint64_t>(b.data() + 48);
  std::copy(b.begin() + 56, b.begin() + 56 + kNonceBytes, h.nonce.begin());
  if (h.world == 0) return bad("world", h.world, "must be >= 1");
  if (h.rank >= h.world) return bad("rank", h.rank, "must be below world = " + std::to_string(h.world));
  if (link > static_cast<std::uint8_t>(LinkKind::control))
    return bad("link", link, "is not a known link kind (0 ring, 1 p2p, 2 rendezvous, 3 control)");
  if (const auto r = get_le<std::uint8_t>(b.data() + 17); r != 0) return bad("reserved@17", r, "must be 0");
  if (const auto r = get_le<std::uint16_t>(b.data() + 18); r != 0) return bad("reserved@18", r, "must be 0");
  h.link = static_cast<LinkKind>(link);
  out = h;
  return {};
}

std::string compare_hello(const Hello& ours, const Hello& theirs, std::uint32_t expected_rank) {
  const std::string me = "rank " + std::to_string(ours.rank);
  const std::string peer = "peer rank " + std::to_string(theirs.rank);
  auto differs = [&](std::string_view what, const std::string& a, const std::string& b) {
    return std::string(what) + " differs: " + me + " has " + a + ", " + peer + " has " + b;
  };
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  if (ours.ring_id != theirs.ring_id) return differs("ring id", num(ours.ring_id), num(theirs.ring_id));
  if (ours.world != theirs.world) return differs("world size", num(ours.world), num(theirs.world));
  if (ours.link != theirs.link)
    return differs("link kind", num(static_cast<std::uint8_t>(ours.link)), num(static_cast<std::uint8_t>(theirs.link)));
  if (expected_rank == kAnyRank ? theirs.rank == ours.rank && ours.link != LinkKind::rendezvous
                                : theirs.rank != expected_rank)
    return me + " expected " + (expected_rank == kAnyRank ? std::string("another rank") : "rank " + num(expected_rank)) +
           " on this connection but the peer says it is rank " + num(theirs.rank);
  const LinkLimits &a = ours.limits, &b = theirs.limits;
  auto limit = [&](const std::string& f, std::uint64_t x, std::uint64_t y) {
    return differs("ring limit '" + std::string(f) + "'", num(x), num(y));
  };
  for (std::size_t i = 0; i < kLimitFields; ++i)
    if (a.fields[i] != b.fields[i])
      return limit(a.names[i].empty() ? "field " + num(i) : std::string(a.names[i]), a.fields[i], b.fields[i]);
  if (a.max_payload != b.max_payload) return limit("max_payload", a.max_payload, b.max_payload);
  if (a.options_digest != b.options_digest)
    return differs("job options (their digest)", num(a.options_digest), num(b.options_digest)) +
           " (the ranks were started with different job options or another job shape)";
  return {};
}

Digest256 auth_proof(std::span<const std::byte> secret, Role role, std::span<const std::byte> initiator_hello,
                     std::span<const std::byte> acceptor_hello) {
  const std::byte role_byte{static_cast<std::uint8_t>(role)};
  return hmac_sha256(secret, {std::as_bytes(std::span(kAuthLabel.data(), kAuthLabel.size())), std::span(&role_byte, 1),
                              initiator_hello, acceptor_hello});
}

}  // namespace ringattn::net
