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
  s.max_heads = 8;
  s.max_kv_heads = 2;
  s.max_head_dim = 64;
  s.max_block_rows = 128;
  return s;
}

// A bf16 block of 2 KV heads of 64: prefix 32 + tags 8/row + K and V 2*128*2 bytes/row.
FrameHeader kv(std::uint32_t rows = 128) { return kv_block_header(DType::bf16, 128, 7, 3, rows); }

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
  FrameHeader h = kv(5);
  h.payload_crc = 0xA1B2C3D4;
  const HeaderBytes b = encode_header(h);
  CHECK(kHeaderBytes == 48);
  CHECK(b[0] == std::byte{'R'});
  CHECK(b[1] == std::byte{'A'});
  CHECK(b[2] == std::byte{'T'});
  CHECK(b[3] == std::byte{'N'});
  CHECK(get_le<std::uint16_t>(&b[4]) == kProtocolVersion);
  CHECK(b[6] == std::byte{16});  // KV_BLOCK
  CHECK(b[7] == std::byte{1});   // bf16
  CHECK(get_le<std::uint64_t>(&b[8]) == 7);
  CHECK(get_le<std::uint64_t>(&b[16]) == 3);
  CHECK(get_le<std::uint32_t>(&b[24]) == 5);
  CHECK(get_le<std::uint32_t>(&b[28]) == 128);
  CHECK(get_le<std::uint64_t>(&b[32]) == 32 + 5 * 8 + 2ull * 5 * 128 * 2);
  CHECK(b[40] == std::byte{0xD4});  // little-endian
  CHECK(get_le<std::uint32_t>(&b[44]) == 0);
}

TEST_CASE("wire: round trip of every kind") {
  const FrameLimits limits = FrameLimits::for_limits(shape());
  FrameHeader st;
  st.kind = FrameKind::state;
  st.rows = 3;
  st.cols = 8 * 66;
  st.payload_bytes = 3ull * 8 * 66 * 4;
  st.step = ~0ull;
  st.job_id = 0x0123456789abcdefull;
  st.payload_crc = 0xFFFFFFFF;
  FrameHeader hello, auth, bye, error;
  hello.kind = FrameKind::hello;
  hello.payload_bytes = kHelloBytes;
  auth.kind = FrameKind::auth;
  auth.payload_bytes = kAuthBytes;
  bye.kind = FrameKind::bye;
  error.kind = FrameKind::error;
  error.payload_bytes = kMaxErrorBytes;
  for (const FrameHeader& h : {kv(), kv(1), st, hello, auth, bye, error}) {
    const HeaderBytes b = encode_header(h);
    CHECK(decode_header(b, limits) == h);
  }
  CHECK(decode_header(encode_header(hello), FrameLimits::handshake_only()) == hello);
}

TEST_CASE("wire: every rejected field is named with its value") {
  const FrameLimits limits = FrameLimits::for_limits(shape());
  SUBCASE("length") {
    const HeaderBytes b = encode_header(kv());
    FrameHeader out;
    CHECK(try_decode_header(std::span(b).first(47), limits, out).find("47 bytes") != std::string::npos);
  }
  SUBCASE("magic") { refused(kv(), {"'magic'", std::to_string(0x4E544153)}, limits, [](HeaderBytes& b) { b[0] = std::byte{'S'}; }); }
  SUBCASE("version") { refused(kv(), {"'version' = 1", "version " + std::to_string(kProtocolVersion)}, limits, [](HeaderBytes& b) { b[4] = std::byte{1}; }); }
  SUBCASE("reserved") { refused(kv(), {"'reserved' = 1"}, limits, [](HeaderBytes& b) { b[44] = std::byte{1}; }); }
  SUBCASE("kind") { refused(kv(), {"'kind' = 99"}, limits, [](HeaderBytes& b) { b[6] = std::byte{99}; }); }
  SUBCASE("dtype") { refused(kv(), {"'dtype' = 7"}, limits, [](HeaderBytes& b) { b[7] = std::byte{7}; }); }
  SUBCASE("rows of a control frame") {
    FrameHeader h;
    h.kind = FrameKind::bye;
    h.rows = 1;
    refused(h, {"'rows' = 1", "BYE"});
  }
  SUBCASE("cols of a control frame") {
    FrameHeader h;
    h.kind = FrameKind::auth;
    h.payload_bytes = kAuthBytes;
    h.cols = 2;
    refused(h, {"'cols' = 2", "AUTH"});
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
  SUBCASE("data before the handshake") { refused(kv(), {"'kind' = 16", "before the handshake"}, FrameLimits::handshake_only()); }
  SUBCASE("rows") {
    refused(kv(129), {"'rows' = 129", "1..128"});
    refused(kv(0), {"'rows' = 0"});
  }
  SUBCASE("cols of a KV block") {
    FrameHeader h = kv();
    h.cols = 129;
    h.payload_bytes = kv_block_bytes(DType::bf16, 129, 128);
    refused(h, {"'cols' = 129", "1..128", "max_kv_heads*max_head_dim"});
  }
  SUBCASE("a KV block's size says whether it carries groups, nothing else") {
    FrameHeader h = kv(10);
    CHECK(try_decode_header(encode_header(h), limits, h).empty());
    h.payload_bytes = kv_block_bytes(DType::bf16, 128, 10, true);  // + 4 bytes a row
    FrameHeader out;
    CHECK(try_decode_header(encode_header(h), limits, out).empty());
    h.payload_bytes += 4;
    refused(h, {"'payload_bytes'", std::to_string(kv_block_bytes(DType::bf16, 128, 10)) + " or " +
                                       std::to_string(kv_block_bytes(DType::bf16, 128, 10, true))});
  }
  SUBCASE("state cols and dtype") {
    FrameHeader h;
    h.kind = FrameKind::state;
    h.rows = 2;
    h.cols = 8 * 66 + 1;
    h.payload_bytes = 2ull * h.cols * 4;
    refused(h, {"'cols' = 529", "1..528"});
    h.cols = 10;
    h.dtype = DType::bf16;
    h.payload_bytes = 2ull * 10 * 2;
    refused(h, {"'dtype' = 1", "STATE"});
  }
  SUBCASE("a QUERY may have 0 rows; its cols and size are bounded like the others") {
    FrameHeader h;
    h.kind = FrameKind::query;
    h.dtype = DType::bf16;
    h.cols = (8 + 2 * 2) * 64;
    h.rows = 0;
    h.payload_bytes = 32;  // the prefix alone: a rank with no token this step
    FrameHeader out;
    CHECK(try_decode_header(encode_header(h), limits, out).empty());
    h.rows = 3;
    h.payload_bytes = 32 + 3 * 12 + 3ull * h.cols * 2;
    CHECK(try_decode_header(encode_header(h), limits, out).empty());
    h.payload_bytes += 2;
    refused(h, {"'payload_bytes'", "QUERY"});
    h.rows = 129;
    refused(h, {"'rows' = 129", "0..128"});
    h.rows = 3;
    h.cols = (8 + 2 * 2) * 64 + 1;
    refused(h, {"'cols' = 769", "1..768"});
  }
  SUBCASE("payload length that disagrees with rows*cols") {
    FrameHeader h = kv();
    h.payload_bytes += 1;
    refused(h, {"'payload_bytes' = " + std::to_string(kv_block_bytes(DType::bf16, 128, 128) + 1),
                std::to_string(kv_block_bytes(DType::bf16, 128, 128)) + " or "});
  }
  SUBCASE("oversized length field") {
    FrameHeader h = kv();
    h.payload_bytes = 1ull << 40;
    refused(h, {"'payload_bytes' = 1099511627776"});
    h.payload_bytes = ~0ull;
    refused(h, {"'payload_bytes' = 18446744073709551615"});
  }
}

TEST_CASE("wire: payload size arithmetic is overflow-safe") {
  bool ok = true;
  CHECK(data_payload_bytes(FrameKind::kv_block, DType::f32, 0xFFFFFFFFu, 0xFFFFFFFFu, false, ok) == 0);
  CHECK_FALSE(ok);
  CHECK(data_payload_bytes(FrameKind::state, DType::f32, 0xFFFFFFFFu, 0xFFFFFFFFu, false, ok) == 0);
  CHECK_FALSE(ok);  // 2^64 - 2^33 + 1 times 4 overflows
  CHECK(data_payload_bytes(FrameKind::kv_block, DType::bf16, 3, 5, false, ok) == 32 + 3 * 8 + 60);
  CHECK(ok);
  CHECK(data_payload_bytes(FrameKind::kv_block, DType::bf16, 3, 5, true, ok) == 32 + 3 * 12 + 60);
  CHECK(data_payload_bytes(FrameKind::query, DType::bf16, 3, 5, false, ok) == 32 + 3 * 12 + 30);
  CHECK(ok);
  CHECK(data_payload_bytes(FrameKind::query, DType::f32, 0xFFFFFFFFu, 0xFFFFFFFFu, true, ok) == 0);
  CHECK_FALSE(ok);
  CHECK(data_payload_bytes(FrameKind::bye, DType::f32, 1, 1, false, ok) == 0);
  CHECK_FALSE(ok);
  CHECK(kv_block_header(DType::bf16, 128, 1, 2, 100).payload_bytes == kv_block_bytes(DType::bf16, 128, 100));
}

TEST_CASE("wire: frame limits follow from the ring's limits, bad limits are refused by field") {
  const FrameLimits l = FrameLimits::for_limits(shape());
  CHECK(l.max_rows == 128);
  CHECK(l.max_kv_cols == 128);
  CHECK(l.max_state_cols == 8 * 66);
  CHECK(l.max_query_cols == (8 + 2 * 2) * 64);
  // QUERY rows (q, k and v of a token, with its position and sequence) are the widest here
  CHECK(l.max_payload == 32 + 128ull * (12 + (8 + 2 * 2) * 64 * 4));
  auto refused_shape = [](LinkLimits s, const std::string& word) {
    try {
      FrameLimits::for_limits(s);
      FAIL("accepted a bad shape");
    } catch (const InvalidArgument& e) {
      CHECK(std::string(e.what()).find(word) != std::string::npos);
    }
  };
  LinkLimits s = shape();
  s.max_heads = 0;
  refused_shape(s, "'max_heads' = 0");
  s = shape();
  s.max_kv_heads = 0;
  refused_shape(s, "'max_kv_heads' = 0");
  s = shape();
  s.max_head_dim = 0;
  refused_shape(s, "'max_head_dim' = 0");
  s = shape();
  s.max_block_rows = 0;
  refused_shape(s, "'max_block_rows' = 0");
  s = shape();
  s.max_block_rows = 0xFFFFFFFFu;
  s.max_head_dim = 1u << 20;
  refused_shape(s, "GiB");
  s = shape();
  s.max_head_dim = 0xFFFFFFFFu;
  refused_shape(s, "overflow");
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
  q[15] = std::byte{1};
  CHECK(try_decode_ping(q, back).find("reserved") != std::string::npos);
}

TEST_CASE("wire: MESSAGE frames carry their type in the tag and any length up to the negotiated maximum") {
  const FrameLimits limits = FrameLimits::for_limits(shape());
  FrameHeader m;
  m.kind = FrameKind::message;
  m.tag = 7;
  m.job_id = 12;
  for (std::uint64_t bytes : {std::uint64_t{0}, std::uint64_t{1}, limits.max_payload}) {
    m.payload_bytes = bytes;
    const HeaderBytes b = encode_header(m);
    CHECK(get_le<std::uint32_t>(&b[44]) == 7);
    CHECK(decode_header(b, limits) == m);
  }
  m.payload_bytes = 16;
  SUBCASE("a type is named") {
    FrameHeader h = m;
    h.tag = 0;
    refused(h, {"'tag' = 0", "MESSAGE names its type"}, limits);
  }
  SUBCASE("no matrix") {
    FrameHeader h = m;
    h.rows = 1;
    refused(h, {"'rows' = 1", "MESSAGE frame has 0"}, limits);
    h.rows = 0;
    h.cols = 4;
    refused(h, {"'cols' = 4"}, limits);
    h.cols = 0;
    h.dtype = DType::bf16;
    refused(h, {"'dtype' = 1"}, limits);
  }
  SUBCASE("bounded") {
    FrameHeader h = m;
    h.payload_bytes = limits.max_payload + 1;
    refused(h, {"'payload_bytes'", "exceeds the negotiated maximum"}, limits);
  }
  SUBCASE("not before the handshake") { refused(m, {"MESSAGE", "before the handshake"}, FrameLimits::handshake_only()); }
  SUBCASE("other kinds have no tag") {
    FrameHeader h = kv();
    h.tag = 3;
    refused(h, {"'reserved' = 3", "only a MESSAGE"}, limits);
    FrameHeader bye;
    bye.kind = FrameKind::bye;
    bye.tag = 1;
    refused(bye, {"'reserved' = 1"}, limits);
  }
}
