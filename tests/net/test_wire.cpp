// The frame header: round trip, and every field a receiver must refuse, with a message
// that names the field and its value.
#include <doctest/doctest.h>

#include <string>

#include "ringattn/byte_order.hpp"
#include "net/wire.hpp"
#include "ringattn/error.hpp"

using namespace ringattn;
using namespace ringattn::net;

namespace {

LinkLimits shape() {
  LinkLimits s;
  s.max_payload = 4096;
  s.fields = {8, 2, 64, 128};
  return s;
}

// A DATA frame of schedule 0x1234, call 7, step 3.
FrameHeader data(std::uint64_t bytes = 100) {
  FrameHeader h = data_header({0x1234, 7, 3});
  h.payload_bytes = bytes;
  return h;
}

// Decoding `h` (after `patch` edits its bytes) fails with a message containing each of `words`.
void refused(FrameHeader h, std::initializer_list<std::string> words, const FrameLimits& limits = FrameLimits::for_limits(shape()),
             void (*patch)(HeaderBytes&) = nullptr) {
  HeaderBytes b = encode_header(h);
  if (patch) patch(b);
  FrameHeader out;
  const std::string err = try_decode_header(b, limits, out);
  INFO("message: " << err);
  REQUIRE_FALSE(err.empty());
  for (const auto& w : words) CHECK(err.find(w) != std::string::npos);
  CHECK_THROWS_AS(decode_header(b, limits), NetworkError);
}

}  // namespace

TEST_CASE("wire: the header layout is pinned byte by byte") {
  FrameHeader h = data(5);
  h.tag = {0xFFFF0201u, 0x0102030405060708ull, 9};
  h.payload_crc = 0xA1B2C3D4;
  const HeaderBytes b = encode_header(h);
  CHECK(kHeaderBytes == 48);
  CHECK(b[0] == std::byte{'R'});
  CHECK(b[1] == std::byte{'A'});
  CHECK(b[2] == std::byte{'T'});
  CHECK(b[3] == std::byte{'N'});
  CHECK(get_le<std::uint16_t>(&b[4]) == kProtocolVersion);
  CHECK(kProtocolVersion == 6);
  CHECK(b[6] == std::byte{16});  // DATA
  CHECK(b[7] == std::byte{0});
  CHECK(get_le<std::uint64_t>(&b[8]) == 0x0102030405060708ull);  // call
  CHECK(b[8] == std::byte{0x08});                                  // little-endian
  CHECK(get_le<std::uint64_t>(&b[16]) == 9);                       // step
  CHECK(get_le<std::uint32_t>(&b[24]) == 0xFFFF0201u);             // schedule
  CHECK(get_le<std::uint32_t>(&b[28]) == 0);
  CHECK(get_le<std::uint64_t>(&b[32]) == 5);
  CHECK(b[40] == std::byte{0xD4});
  CHECK(get_le<std::uint32_t>(&b[44]) == 0);
}

TEST_CASE("wire: round trip of every kind") {
  const FrameLimits limits = FrameLimits::for_limits(shape());
  FrameHeader big = data(4096);
  big.tag = {~0u, ~0ull, ~0ull};
  big.payload_crc = 0xFFFFFFFF;
  FrameHeader hello, auth, bye, error;
  hello.kind = FrameKind::hello;
  hello.payload_bytes = kHelloBytes;
  auth.kind = FrameKind::auth;
  auth.payload_bytes = kAuthBytes;
  bye.kind = FrameKind::bye;
  error.kind = FrameKind::error;
  error.payload_bytes = kMaxErrorBytes;
  for (const FrameHeader& h : {data(), data(0), big, hello, auth, bye, error}) {
    const HeaderBytes b = encode_header(h);
    CHECK(decode_header(b, limits) == h);
  }
  CHECK(decode_header(encode_header(hello), FrameLimits::handshake_only()) == hello);
}

TEST_CASE("wire: every rejected field is named with its value") {
  const FrameLimits limits = FrameLimits::for_limits(shape());
  SUBCASE("length") {
    const HeaderBytes b = encode_header(data());
    FrameHeader out;
    CHECK(try_decode_header(std::span(b).first(47), limits, out).find("47 bytes") != std::string::npos);
  }
  SUBCASE("magic") { refused(data(), {"'magic'", std::to_string(0x4E544153)}, limits, [](HeaderBytes& b) { b[0] = std::byte{'S'}; }); }
  SUBCASE("version") { refused(data(), {"'version' = 1", "version " + std::to_string(kProtocolVersion)}, limits, [](HeaderBytes& b) { b[4] = std::byte{1}; }); }
  SUBCASE("reserved") {
    refused(data(), {"'reserved' = 1", "offset 7"}, limits, [](HeaderBytes& b) { b[7] = std::byte{1}; });
    refused(data(), {"'reserved' = 2", "offset 28"}, limits, [](HeaderBytes& b) { b[28] = std::byte{2}; });
    refused(data(), {"'reserved' = 3", "offset 44"}, limits, [](HeaderBytes& b) { b[44] = std::byte{3}; });
  }
  SUBCASE("kind") { refused(data(), {"'kind' = 99"}, limits, [](HeaderBytes& b) { b[6] = std::byte{99}; }); }
  SUBCASE("a control frame has no tag") {
    FrameHeader h;
    h.kind = FrameKind::bye;
    h.tag.schedule = 1;
    refused(h, {"'schedule' = 1", "BYE"});
    h.tag = {0, 2, 0};
    refused(h, {"'call' = 2", "BYE"});
    h.kind = FrameKind::auth;
    h.payload_bytes = kAuthBytes;
    h.tag = {0, 0, 3};
    refused(h, {"'step' = 3", "AUTH"});
  }
  SUBCASE("control payload sizes") {
    FrameHeader h;
    h.kind = FrameKind::hello;
    h.payload_bytes = kHelloBytes + 1;
    refused(h, {"'payload_bytes' = 89", "HELLO", "88"});
    h.kind = FrameKind::error;
    h.payload_bytes = kErrorPrefixBytes;  // the prefix without any text
    refused(h, {"'payload_bytes' = 8", "ERROR"});
    h.payload_bytes = kErrorPrefixBytes + kMaxErrorBytes + 1;
    refused(h, {"'payload_bytes' = 1033", "9..1032"});
    h.kind = FrameKind::ping;
    h.payload_bytes = kPingBytes + 1;
    refused(h, {"'payload_bytes' = 17", "PING", "16"});
    h.kind = FrameKind::bye;
    h.payload_bytes = 1;
    refused(h, {"'payload_bytes' = 1", "BYE"});
  }
  SUBCASE("data before the handshake") { refused(data(), {"'kind' = 16", "before the handshake"}, FrameLimits::handshake_only()); }
  SUBCASE("a DATA frame names its schedule") {
    FrameHeader h = data();
    h.tag.schedule = 0;
    refused(h, {"'schedule' = 0", "1 or more"});
  }
  SUBCASE("a DATA frame's length is bounded by the negotiated maximum, nothing else") {
    FrameHeader out;
    CHECK(try_decode_header(encode_header(data(0)), limits, out).empty());
    CHECK(try_decode_header(encode_header(data(4096)), limits, out).empty());
    refused(data(4097), {"'payload_bytes' = 4097", "exceeds the negotiated maximum 4096"});
    refused(data(1ull << 40), {"'payload_bytes' = 1099511627776"});
    refused(data(~0ull), {"'payload_bytes' = 18446744073709551615"});
  }
}

TEST_CASE("wire: tags match on schedule, call and step; a receive may take any call") {
  const Tag t{5, 7, 9};
  CHECK(matches(t, t));
  CHECK_FALSE(matches(t, Tag{6, 7, 9}));
  CHECK_FALSE(matches(t, Tag{5, 8, 9}));
  CHECK_FALSE(matches(t, Tag{5, 7, 10}));
  CHECK(matches(Tag{5, kAnyCall, 9}, Tag{5, 123, 9}));
  CHECK_FALSE(matches(Tag{5, kAnyCall, 9}, Tag{5, 123, 8}));
  CHECK(to_string(Tag{0xFFFF0201u, 3, 1}) == "schedule 0xffff0201 call 3 step 1");
}

TEST_CASE("wire: frame limits: the negotiated maximum within the ceiling") {
  CHECK(FrameLimits::for_limits(shape()).max_payload == 4096);
  CHECK(FrameLimits::handshake_only().max_payload == 0);
  LinkLimits s = shape();
  s.max_payload = 0;
  CHECK_THROWS_WITH_AS(FrameLimits::for_limits(s), doctest::Contains("'max_payload' = 0"), InvalidArgument);
  s.max_payload = kMaxPayloadBytes + 1;
  CHECK_THROWS_WITH_AS(FrameLimits::for_limits(s), doctest::Contains("GiB frame ceiling"), InvalidArgument);
  s.max_payload = kMaxPayloadBytes;
  CHECK(FrameLimits::for_limits(s).max_payload == kMaxPayloadBytes);
  // the fingerprint names every compared field, not the names
  LinkLimits a = shape(), b = shape();
  b.names = {"w", "x", "y", "z"};
  CHECK(limits_fingerprint(a) == limits_fingerprint(b));
  CHECK(a == b);
  b.fields[3] = 64;
  CHECK(limits_fingerprint(a) != limits_fingerprint(b));
  b = shape();
  b.max_payload = 4095;
  CHECK(limits_fingerprint(a) != limits_fingerprint(b));
}

TEST_CASE("wire: a peer's ERROR text cannot forge log lines") {
  const std::string raw = "bad\n[rank 0] fake line\x1b[31m";
  CHECK(error_text(std::as_bytes(std::span(raw.data(), raw.size()))) == "bad?[rank 0] fake line?[31m");
}

TEST_CASE("wire: ERROR carries the origin rank and the cause, PING the progress and state") {
  const std::string e = encode_error({7, FailureCause::peer_stalled, "rank 7: stuck\n\x1b[31m"});
  const ErrorInfo d = decode_error(std::as_bytes(std::span(e.data(), e.size())));
  CHECK(d.origin == 7);
  CHECK(d.cause == FailureCause::peer_stalled);
  CHECK(d.text == "rank 7: stuck??[31m");  // printable ASCII only: no forged log lines
  const std::string u = encode_error({-1, FailureCause::local, std::string(5000, 'x')});
  CHECK(u.size() == kErrorPrefixBytes + kMaxErrorBytes);
  const ErrorInfo du = decode_error(std::as_bytes(std::span(u.data(), u.size())));
  CHECK(du.origin == -1);
  std::string bad = e;
  bad[4] = char(99);  // unknown cause: kept as unknown, the text survives
  CHECK(decode_error(std::as_bytes(std::span(bad.data(), bad.size()))).cause == FailureCause::unknown);

  const auto p = encode_ping({123456789012345ull, PeerState::busy});
  PingInfo back;
  REQUIRE(try_decode_ping(p, back).empty());
  CHECK(back.progress == 123456789012345ull);
  CHECK(back.state == PeerState::busy);
  CHECK_FALSE(back.leaving);
  const auto l = encode_ping({7, PeerState::idle, true});
  REQUIRE(try_decode_ping(l, back).empty());
  CHECK(back.leaving);
  CHECK(l[9] == std::byte{1});
  auto q = p;
  q[9] = std::byte{2};  // a flag this version does not know
  CHECK(try_decode_ping(q, back).find("'flags' = 2") != std::string::npos);
  q = p;
  q[8] = std::byte{3};
  CHECK(try_decode_ping(q, back).find("'state' = 3") != std::string::npos);
  q = p;
  q[11] = std::byte{1};
  CHECK(try_decode_ping(q, back).find("reserved byte 11") != std::string::npos);
  const auto aged = encode_ping({1, PeerState::waiting, false, 0xA1B2C3D4u});
  CHECK(get_le<std::uint32_t>(&aged[12]) == 0xA1B2C3D4u);
  REQUIRE(try_decode_ping(aged, back).empty());
  CHECK(back.age_ms == 0xA1B2C3D4u);
}
