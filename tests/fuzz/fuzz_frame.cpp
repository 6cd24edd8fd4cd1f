// libFuzzer target for everything a peer can make a node parse: the 48-byte frame
// header (under the handshake limits and under a job's limits), the HELLO payload, the
// CRC of whatever payload follows, and the ring's limits themselves (a HELLO carries them).
//
// Beyond "no crash, no UB", it checks properties: an accepted header re-encodes to the
// same bytes and never claims a payload above the negotiated limit; an accepted HELLO
// re-encodes to the same bytes; the fast CRC equals the portable one; limits derived from
// any accepted shape stay under the hard ceiling.
//
//   meson setup build-fuzz -Dfuzzers=true (with CXX=clang++), ninja -C build-fuzz tests/fuzz/fuzz_frame
//   build-fuzz/tests/fuzz/fuzz_frame -max_total_time=60 tests/fuzz/corpus/frame
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "ringattn/byte_order.hpp"
#include "net/crc32c.hpp"
#include "net/handshake.hpp"
#include "net/wire.hpp"
#include "ringattn/error.hpp"

using namespace ringattn;
using namespace ringattn::net;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

const FrameLimits& job_limits() {
  static const FrameLimits limits = [] {
    LinkLimits s;
    s.max_payload = 1 << 20;
    return FrameLimits::for_limits(s);
  }();
  return limits;
}

void fuzz_header(std::span<const std::byte> in) {
  if (in.size() < kHeaderBytes) return;
  const auto header = in.first(kHeaderBytes);
  const auto rest = in.subspan(kHeaderBytes);
  for (const FrameLimits& limits : {FrameLimits::handshake_only(), job_limits()}) {
    FrameHeader h;
    if (!try_decode_header(header, limits, h).empty()) continue;
    const HeaderBytes again = encode_header(h);
    require(std::equal(again.begin(), again.end(), header.begin()));
    require(h.payload_bytes <= std::max<std::uint64_t>(limits.max_payload, kMaxPeersBytes));
    require(check_header(h, limits).empty());
    const auto payload = rest.first(static_cast<std::size_t>(std::min<std::uint64_t>(rest.size(), h.payload_bytes)));
    require(crc32c(payload) == crc32c_generic(0, payload));
    if (h.kind == FrameKind::hello && payload.size() == kHelloBytes) {
      Hello hello;
      (void)try_decode_hello(payload, hello);
    }
  }
}

void fuzz_hello(std::span<const std::byte> in) {
  Hello h;
  if (!try_decode_hello(in, h).empty()) return;
  const HelloBytes again = encode_hello(h);
  require(std::equal(again.begin(), again.end(), in.begin()));
  Hello ours = h;
  ours.rank = (h.rank + 1) % h.world;
  (void)compare_hello(ours, h, h.rank);
}

void fuzz_shape(std::span<const std::byte> in) {
  if (in.size() < 17) return;
  LinkLimits s;
  s.max_payload = get_le<std::uint64_t>(in.data());
  s.fields[0] = get_le<std::uint32_t>(in.data() + 8);
  s.options_digest = get_le<std::uint8_t>(in.data() + 16);
  try {
    const FrameLimits l = FrameLimits::for_limits(s);
    require(l.max_payload <= kMaxPayloadBytes && l.max_payload == s.max_payload);
  } catch (const InvalidArgument&) {
    require(s.max_payload == 0 || s.max_payload > kMaxPayloadBytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  fuzz_header(in);
  fuzz_hello(in);
  fuzz_shape(in);
  return 0;
}
