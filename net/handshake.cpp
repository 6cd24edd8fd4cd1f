// HELLO encoding/comparison and the AUTH proof (protocol in handshake.hpp).
#include "net/handshake.hpp"

#include <algorithm>
#include <string_view>

#include "net/byte_order.hpp"

namespace ringattn::net {
namespace {

constexpr std::string_view kAuthLabel = "ringattn-auth-v1";

std::string bad(std::string_view f, std::uint64_t v, std::string_view why) {
  return "HELLO field '" + std::string(f) + "' = " + std::to_string(v) + " " + std::string(why);
}

}  // namespace

HelloBytes encode_hello(const Hello& h) {
  HelloBytes b{};
  put_le<std::uint64_t>(b.data() + 0, h.ring_id);
  put_le<std::uint32_t>(b.data() + 8, h.rank);
  put_le<std::uint32_t>(b.data() + 12, h.world);
  put_le<std::uint8_t>(b.data() + 16, static_cast<std::uint8_t>(h.link));
  put_le<std::uint8_t>(b.data() + 17, static_cast<std::uint8_t>(h.shape.dtype));
  put_le<std::uint32_t>(b.data() + 20, h.shape.heads);
  put_le<std::uint32_t>(b.data() + 24, h.shape.kv_heads);
  put_le<std::uint32_t>(b.data() + 28, h.shape.head_dim);
  put_le<std::uint32_t>(b.data() + 32, h.shape.max_block_rows);
  put_le<std::uint64_t>(b.data() + 40, h.shape.tokens);
  put_le<std::uint64_t>(b.data() + 48, h.shape.options_digest);
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
  const auto dtype = get_le<std::uint8_t>(b.data() + 17);
  h.shape.heads = get_le<std::uint32_t>(b.data() + 20);
  h.shape.kv_heads = get_le<std::uint32_t>(b.data() + 24);
  h.shape.head_dim = get_le<std::uint32_t>(b.data() + 28);
  h.shape.max_block_rows = get_le<std::uint32_t>(b.data() + 32);
  h.shape.tokens = get_le<std::uint64_t>(b.data() + 40);
  h.shape.options_digest = get_le<std::uint64_t>(b.data() + 48);
  std::copy(b.begin() + 56, b.begin() + 56 + kNonceBytes, h.nonce.begin());
  if (h.world == 0) return bad("world", h.world, "must be >= 1");
  if (h.rank >= h.world) return bad("rank", h.rank, "must be below world = " + std::to_string(h.world));
  if (link != static_cast<std::uint8_t>(LinkKind::ring)) return bad("link", link, "is not a known link kind (0 ring)");
  if (dtype > static_cast<std::uint8_t>(DType::bf16)) return bad("dtype", dtype, "is not a known dtype (0 f32, 1 bf16)");
  if (const auto r = get_le<std::uint16_t>(b.data() + 18); r != 0) return bad("reserved@18", r, "must be 0");
  if (const auto r = get_le<std::uint32_t>(b.data() + 36); r != 0) return bad("reserved@36", r, "must be 0");
  h.link = static_cast<LinkKind>(link);
  h.shape.dtype = static_cast<DType>(dtype);
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
  if (theirs.rank != expected_rank)
    return me + " expected rank " + num(expected_rank) + " on this connection but the peer says it is rank " +
           num(theirs.rank);
  const JobShape &a = ours.shape, &b = theirs.shape;
  auto shape_field = [&](std::string_view f, std::uint64_t x, std::uint64_t y) {
    return differs("job shape field '" + std::string(f) + "'", num(x), num(y));
  };
  if (a.heads != b.heads) return shape_field("heads", a.heads, b.heads);
  if (a.kv_heads != b.kv_heads) return shape_field("kv_heads", a.kv_heads, b.kv_heads);
  if (a.head_dim != b.head_dim) return shape_field("head_dim", a.head_dim, b.head_dim);
  if (a.max_block_rows != b.max_block_rows) return shape_field("max_block_rows", a.max_block_rows, b.max_block_rows);
  if (a.dtype != b.dtype)
    return differs("job shape field 'dtype'", std::string(to_string(a.dtype)), std::string(to_string(b.dtype)));
  if (a.tokens != b.tokens) return shape_field("tokens", a.tokens, b.tokens);
  if (a.options_digest != b.options_digest) return shape_field("options_digest", a.options_digest, b.options_digest);
  return {};
}

Digest256 auth_proof(std::span<const std::byte> secret, Role role, std::span<const std::byte> initiator_hello,
                     std::span<const std::byte> acceptor_hello) {
  const std::byte role_byte{static_cast<std::uint8_t>(role)};
  return hmac_sha256(secret, {std::as_bytes(std::span(kAuthLabel.data(), kAuthLabel.size())), std::span(&role_byte, 1),
                              initiator_hello, acceptor_hello});
}

}  // namespace ringattn::net
