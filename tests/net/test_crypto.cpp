// CRC32C, SHA-256, HMAC-SHA256 and HKDF-SHA256 against published vectors; the hardware
// CRC against the portable one on every length and alignment that exercises its lanes.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "net/crc32c.hpp"
#include "net/crypto.hpp"

using namespace ringattn::net;

namespace {

std::string hex(std::span<const std::byte> d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (std::byte b : d) {
    s += kHex[std::to_integer<unsigned>(b) >> 4];
    s += kHex[std::to_integer<unsigned>(b) & 15u];
  }
  return s;
}

std::span<const std::byte> as_bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::vector<std::byte> repeat(unsigned char c, std::size_t n) { return std::vector<std::byte>(n, std::byte{c}); }

}  // namespace

TEST_CASE("crc32c: known vectors (RFC 3720 B.4 and the check value)") {
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c("") == 0u);
  CHECK(crc32c(repeat(0x00, 32)) == 0x8A9136AAu);
  CHECK(crc32c(repeat(0xFF, 32)) == 0x62A8AB43u);
  std::vector<std::byte> up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[static_cast<std::size_t>(i)] = std::byte(static_cast<unsigned char>(i));
    down[static_cast<std::size_t>(i)] = std::byte(static_cast<unsigned char>(31 - i));
  }
  CHECK(crc32c(up) == 0x46DD794Eu);
  CHECK(crc32c(down) == 0x113FDB5Cu);
  CHECK(crc32c_generic(0, as_bytes("123456789")) == 0xE3069283u);
}

TEST_CASE("crc32c: every path of this CPU equals the portable oracle at every length, offset and split") {
  MESSAGE("CRC32C paths here: sse42 " << crc32c_has(Crc32cPath::sse42) << ", fold128 " << crc32c_has(Crc32cPath::fold128)
                                       << ", fold512 " << crc32c_has(Crc32cPath::fold512));
  std::mt19937 rng(7);
  std::vector<std::byte> data(3 * 8192 * 2 + 3 * 256 * 3 + 77);  // fold blocks, 16-byte steps and tails
  for (auto& b : data) b = std::byte(static_cast<unsigned char>(rng()));
  const std::span<const std::byte> all(data);
  for (std::size_t len : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 255u, 256u, 257u, 271u, 272u, 319u, 320u, 321u, 767u, 768u,
                          769u, 4095u, 4096u, 3u * 8192u + 13u, static_cast<unsigned>(data.size() - 8)})
    for (std::size_t off = 0; off < 8; ++off) {
      const auto part = all.subspan(off, len);
      const std::uint32_t want = crc32c_generic(0, part);
      REQUIRE(crc32c(part) == want);
      for (Crc32cPath path : {Crc32cPath::sse42, Crc32cPath::fold128, Crc32cPath::fold512}) {
        CAPTURE(static_cast<int>(path));
        REQUIRE(crc32c_with(path, 0, part) == want);
        REQUIRE(crc32c_with(path, 0x12345678u, part) == crc32c_generic(0x12345678u, part));
      }
    }
  // Incremental: crc over a split equals crc over the whole.
  for (std::size_t cut : {0u, 1u, 100u, 8192u, 30000u}) {
    const std::uint32_t whole = crc32c(all);
    CHECK(crc32c(crc32c(all.first(cut)), all.subspan(cut)) == whole);
    CHECK(crc32c_generic(crc32c_generic(0, all.first(cut)), all.subspan(cut)) == whole);
  }
}

TEST_CASE("sha256: FIPS 180-4 examples") {
  CHECK(hex(sha256(as_bytes(""))) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex(sha256(as_bytes("abc"))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex(sha256(as_bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(hex(sha256(repeat('a', 1000000))) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("hmac-sha256: RFC 4231 test cases 1, 2, 3, 6, 7") {
  CHECK(hex(hmac_sha256(repeat(0x0b, 20), {as_bytes("Hi There")})) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex(hmac_sha256(as_bytes("Jefe"), {as_bytes("what do ya want "), as_bytes("for nothing?")})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex(hmac_sha256(repeat(0xaa, 20), {repeat(0xdd, 50)})) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  CHECK(hex(hmac_sha256(repeat(0xaa, 131), {as_bytes("Test Using Larger Than Block-Size Key - Hash Key First")})) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(hex(hmac_sha256(repeat(0xaa, 131),
                        {as_bytes("This is a test using a larger than block-size key and a larger than block-size data. "
                                  "The key needs to be hashed before being used by the HMAC algorithm.")})) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("hmac-sha256: an empty key and empty message parts") {
  CHECK(hex(hmac_sha256({}, {})) == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  CHECK(hex(hmac_sha256(as_bytes("Jefe"), {{}, as_bytes("what do ya want for nothing?"), {}})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("hkdf-sha256: RFC 5869 test cases 1, 2, 3") {
  auto range = [](unsigned from, unsigned to) {
    std::vector<std::byte> v;
    for (unsigned i = from; i < to; ++i) v.push_back(std::byte(static_cast<unsigned char>(i)));
    return v;
  };
  std::vector<std::byte> okm(42);
  hkdf_sha256(repeat(0x0b, 22), range(0x00, 0x0d), range(0xf0, 0xfa), okm);
  CHECK(hex(okm) == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
  hkdf_sha256(repeat(0x0b, 22), {}, {}, okm);
  CHECK(hex(okm) == "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8");
  okm.resize(82);
  hkdf_sha256(range(0x00, 0x50), range(0x60, 0xb0), range(0xb0, 0x100), okm);
  CHECK(hex(okm) ==
        "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09da3275600c2f09b8"
        "367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87");
}

TEST_CASE("constant_time_equal") {
  const auto a = repeat(1, 32);
  auto b = a;
  CHECK(constant_time_equal(a, b));
  b[31] = std::byte{2};
  CHECK_FALSE(constant_time_equal(a, b));
  CHECK_FALSE(constant_time_equal(a, std::span(b).first(31)));
  b = a;
  b[0] = std::byte{0};
  CHECK_FALSE(constant_time_equal(a, b));
  CHECK(constant_time_equal({}, {}));
}
