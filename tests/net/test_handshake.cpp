// HELLO encoding and comparison, and the AUTH proof (loading the secret: test_secret.cpp).
#include <doctest/doctest.h>

#include <string>

#include "net/handshake.hpp"
#include "net/secret.hpp"
#include "ringattn/byte_order.hpp"

using namespace ringattn;
using namespace ringattn::net;

namespace {

Hello hello(std::uint32_t rank) {
  Hello h;
  h.ring_id = 99;
  h.rank = rank;
  h.world = 4;
  h.limits.fields = {8, 2, 128, 512, 2};
  h.limits.names = {"max_heads", "max_kv_heads", "max_head_dim", "max_block_rows", "group_size (the mesh's group: --tp)"};
  h.limits.max_payload = 1 << 20;
  h.limits.options_digest = 0xfeed;
  fill_random(h.nonce);
  return h;
}

std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

}  // namespace

TEST_CASE("hello: round trip and field checks") {
  const Hello h = hello(3);
  const HelloBytes b = encode_hello(h);
  Hello out;
  REQUIRE(try_decode_hello(b, out).empty());
  CHECK(out.ring_id == h.ring_id);
  CHECK(out.rank == 3);
  CHECK(out.world == 4);
  CHECK(out.limits == h.limits);
  CHECK(out.nonce == h.nonce);

  auto refused = [&](std::size_t at, std::byte v, const std::string& word) {
    HelloBytes bad = b;
    bad[at] = v;
    Hello o;
    const std::string err = try_decode_hello(bad, o);
    INFO(err);
    CHECK(err.find(word) != std::string::npos);
  };
  refused(8, std::byte{4}, "'rank' = 4");       // rank == world
  refused(12, std::byte{0}, "'world'");         // low byte 0 -> world 0
  refused(16, std::byte{4}, "'link' = 4");  // 3 is the control link of `ringattn serve`
  refused(17, std::byte{2}, "reserved@17");
  refused(18, std::byte{1}, "reserved");
  CHECK(get_le<std::uint64_t>(b.data() + 40) == h.limits.max_payload);  // the limit fields at 20..40, max_payload at 40
  CHECK(get_le<std::uint32_t>(b.data() + 28) == 128);
  CHECK(get_le<std::uint32_t>(b.data() + 36) == 2);  // the fifth field (a mesh's group size)
  Hello o;
  CHECK(try_decode_hello(std::span(b).first(87), o).find("'size' = 87") != std::string::npos);
}

TEST_CASE("hello: a mismatch names the field and both values") {
  const Hello ours = hello(1);
  auto differs = [&](Hello theirs, std::uint32_t expected, std::initializer_list<std::string> words) {
    const std::string err = compare_hello(ours, theirs, expected);
    INFO(err);
    REQUIRE_FALSE(err.empty());
    for (const auto& w : words) CHECK(err.find(w) != std::string::npos);
  };
  CHECK(compare_hello(ours, hello(0), 0).empty());
  Hello t = hello(0);
  t.ring_id = 100;
  differs(t, 0, {"ring id", "99", "100"});
  t = hello(0);
  t.world = 5;
  differs(t, 0, {"world size", "4", "5"});
  differs(hello(2), 0, {"expected rank 0", "rank 2"});
  t = hello(0);
  t.limits.fields[2] = 64;
  differs(t, 0, {"ring limit 'max_head_dim'", "rank 1 has 128", "peer rank 0 has 64"});
  t = hello(0);
  t.limits.fields[1] = 8;
  differs(t, 0, {"'max_kv_heads'"});
  t = hello(0);
  t.limits.fields[0] = 16;
  differs(t, 0, {"'max_heads'"});
  t = hello(0);
  t.limits.fields[3] = 256;
  differs(t, 0, {"'max_block_rows'"});
  // Daemons started with another --tp: the refusal names the option, not a digest.
  t = hello(0);
  t.limits.fields[4] = 1;
  differs(t, 0, {"'group_size (the mesh's group: --tp)'", "rank 1 has 2", "peer rank 0 has 1"});
  t = hello(0);
  t.limits.max_payload = 4096;
  differs(t, 0, {"'max_payload'", "1048576", "4096"});
  t = hello(0);
  t.limits.options_digest = 1;
  differs(t, 0, {"job options", "another job shape"});
  t = hello(0);
  t.link = LinkKind::p2p;
  differs(t, 0, {"link kind"});
  // An acceptor of on-demand links takes any other rank, not its own.
  Hello p2p_ours = ours, p2p_theirs = hello(3);
  p2p_ours.link = p2p_theirs.link = LinkKind::p2p;
  CHECK(compare_hello(p2p_ours, p2p_theirs, kAnyRank).empty());
  CHECK_FALSE(compare_hello(p2p_ours, hello(1), kAnyRank).empty());
}

TEST_CASE("auth: proofs bind the secret, the role and both hellos") {
  const HelloBytes a = encode_hello(hello(0)), b = encode_hello(hello(1));
  const std::string secret = "s3cret-s3cret-s3cret";
  const auto p = auth_proof(bytes(secret), Role::initiator, a, b);
  CHECK(p == auth_proof(bytes(secret), Role::initiator, a, b));
  CHECK(p != auth_proof(bytes(secret), Role::acceptor, a, b));  // no reflection
  CHECK(p != auth_proof(bytes("s3cret-s3cret-s3creT"), Role::initiator, a, b));
  CHECK(p != auth_proof(bytes(secret), Role::initiator, b, a));
  const HelloBytes a2 = encode_hello(hello(0));  // fresh nonce: no replay
  CHECK(p != auth_proof(bytes(secret), Role::initiator, a2, b));
}
