// SHA-256 / HMAC-SHA256, straight from FIPS 180-4 section 6.2 and RFC 2104.
#include "net/sha256.hpp"

#include <algorithm>

namespace ringattn::net {
namespace {

constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

constexpr std::size_t kBlock = 64;

}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::compress(const std::byte* block) {
  std::array<std::uint32_t, 64> w{};
  for (std::size_t t = 0; t < 16; ++t)
    w[t] = std::to_integer<std::uint32_t>(block[4 * t]) << 24 | std::to_integer<std::uint32_t>(block[4 * t + 1]) << 16 |
           std::to_integer<std::uint32_t>(block[4 * t + 2]) << 8 | std::to_integer<std::uint32_t>(block[4 * t + 3]);
  for (std::size_t t = 16; t < 64; ++t) {
    const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  auto [a, b, c, d, e, f, g, h] = h_;
  for (std::size_t t = 0; t < 64; ++t) {
    const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
    const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

void Sha256::update(std::span<const std::byte> data) {
  total_bytes_ += data.size();
  while (!data.empty()) {
    const std::size_t take = std::min(kBlock - buf_len_, data.size());
    std::copy_n(data.begin(), take, buf_.begin() + static_cast<std::ptrdiff_t>(buf_len_));
    buf_len_ += take;
    data = data.subspan(take);
    if (buf_len_ == kBlock) {
      compress(buf_.data());
      buf_len_ = 0;
    }
  }
}

Digest256 Sha256::finish() {
  const std::uint64_t bits = total_bytes_ * 8;
  const std::byte one{0x80};
  update(std::span(&one, 1));
  const std::byte zero{0};
  while (buf_len_ != kBlock - 8) update(std::span(&zero, 1));
  std::array<std::byte, 8> len{};
  for (std::size_t i = 0; i < 8; ++i) len[i] = static_cast<std::byte>(bits >> (56 - 8 * i));
  update(len);
  Digest256 out{};
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t k = 0; k < 4; ++k) out[4 * i + k] = static_cast<std::byte>(h_[i] >> (24 - 8 * k));
  return out;
}

Digest256 sha256(std::span<const std::byte> data) {
  Sha256 s;
  s.update(data);
  return s.finish();
}

Digest256 hmac_sha256(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts) {
  std::array<std::byte, kBlock> k0{};
  if (key.size() > kBlock) {
    const Digest256 hk = sha256(key);
    std::copy(hk.begin(), hk.end(), k0.begin());
  } else {
    std::copy(key.begin(), key.end(), k0.begin());
  }
  std::array<std::byte, kBlock> pad{};
  for (std::size_t i = 0; i < kBlock; ++i) pad[i] = k0[i] ^ std::byte{0x36};
  Sha256 inner;
  inner.update(pad);
  for (auto p : parts) inner.update(p);
  const Digest256 inner_digest = inner.finish();
  for (std::size_t i = 0; i < kBlock; ++i) pad[i] = k0[i] ^ std::byte{0x5c};
  Sha256 outer;
  outer.update(pad);
  outer.update(inner_digest);
  return outer.finish();
}

bool constant_time_equal(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size()) return false;  // sizes are public (fixed MAC length)
  std::byte diff{0};
  for (std::size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == std::byte{0};
}

}  // namespace ringattn::net
