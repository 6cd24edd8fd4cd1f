// Frame header encoding and validation (the format is described in wire.hpp).
#include "net/wire.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "ringattn/byte_order.hpp"
#include "net/crc32c.hpp"
#include "ringattn/error.hpp"

namespace ringattn::net {
namespace {

// Byte offsets of the header fields.
constexpr std::size_t kOffMagic = 0, kOffVersion = 4, kOffKind = 6, kOffReserved8 = 7, kOffCall = 8, kOffStep = 16,
                      kOffSchedule = 24, kOffReserved32a = 28, kOffPayload = 32, kOffCrc = 40, kOffReserved32b = 44;

bool known_kind(std::uint8_t k) {
  switch (static_cast<FrameKind>(k)) {
    case FrameKind::hello:
    case FrameKind::auth:
    case FrameKind::bye:
    case FrameKind::error:
    case FrameKind::ping:
    case FrameKind::address:
    case FrameKind::peers:
    case FrameKind::data: return true;
  }
  return false;
}

std::string field(std::string_view name, std::uint64_t value, std::string_view why) {
  return "frame field '" + std::string(name) + "' = " + std::to_string(value) + " " + std::string(why);
}

}  // namespace

std::string_view to_string(FrameKind k) {
  switch (k) {
    case FrameKind::hello: return "HELLO";
    case FrameKind::auth: return "AUTH";
    case FrameKind::bye: return "BYE";
    case FrameKind::error: return "ERROR";
    case FrameKind::ping: return "PING";
    case FrameKind::address: return "ADDRESS";
    case FrameKind::peers: return "PEERS";
    case FrameKind::data: return "DATA";
  }
  return "KIND(unknown)";
}

std::string to_string(const Tag& t) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "schedule 0x%08x call %llu step %llu", t.schedule,
                static_cast<unsigned long long>(t.call), static_cast<unsigned long long>(t.step));
  return buf;
}


std::string error_text(std::span<const std::byte> payload) {
  std::string out;
  out.reserve(payload.size());
  for (std::byte b : payload) {
    const auto c = std::to_integer<unsigned char>(b);
    out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  }
  return out;
}

std::string encode_error(const ErrorInfo& e) {
  std::string text = e.text.empty() ? std::string("(no reason given)") : e.text;
  if (text.size() > kMaxErrorBytes) text.resize(kMaxErrorBytes);
  std::string out(kErrorPrefixBytes, '\0');
  auto* p = reinterpret_cast<std::byte*>(out.data());
  put_le<std::uint32_t>(p, e.origin < 0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(e.origin));
  put_le<std::uint8_t>(p + 4, static_cast<std::uint8_t>(e.cause));
  return out + text;
}

ErrorInfo decode_error(std::span<const std::byte> payload) {
  ErrorInfo e;
  if (payload.size() < kErrorPrefixBytes) {
    e.text = "(malformed ERROR frame)";
    return e;
  }
  const auto origin = get_le<std::uint32_t>(payload.data());
  e.origin = origin == 0xFFFFFFFFu || origin > 0x7FFFFFFFu ? -1 : static_cast<int>(origin);
  const auto cause = get_le<std::uint8_t>(payload.data() + 4);
  e.cause = cause <= static_cast<std::uint8_t>(FailureCause::protocol) ? static_cast<FailureCause>(cause)
                                                                        : FailureCause::unknown;
  e.text = error_text(payload.subspan(kErrorPrefixBytes));
  for (std::size_t i = 5; i < kErrorPrefixBytes; ++i)
    if (payload[i] != std::byte{0}) e.text += " (ERROR frame with non-zero reserved bytes)";
  return e;
}

std::string_view to_string(PeerState s) {
  switch (s) {
    case PeerState::idle: return "idle";
    case PeerState::busy: return "busy";
    case PeerState::waiting: return "waiting";
  }
  return "unknown";
}

std::array<std::byte, kPingBytes> encode_ping(const PingInfo& p) {
  std::array<std::byte, kPingBytes> b{};
  put_le<std::uint64_t>(b.data(), p.progress);
  put_le<std::uint8_t>(b.data() + 8, static_cast<std::uint8_t>(p.state));
  put_le<std::uint8_t>(b.data() + 9, p.leaving ? 1 : 0);
  put_le<std::uint32_t>(b.data() + 12, p.age_ms);
  return b;
}

std::string try_decode_ping(std::span<const std::byte> b, PingInfo& out) {
  if (b.size() != kPingBytes) return "PING payload is " + std::to_string(b.size()) + " bytes, expected 16";
  const auto state = get_le<std::uint8_t>(b.data() + 8);
  if (state > static_cast<std::uint8_t>(PeerState::waiting))
    return "PING field 'state' = " + std::to_string(state) + " is not a known state";
  const auto flags = get_le<std::uint8_t>(b.data() + 9);
  if (flags > 1) return "PING field 'flags' = " + std::to_string(flags) + " has bits other than 'leaving'";
  for (std::size_t i = 10; i < 12; ++i)
    if (b[i] != std::byte{0}) return "PING reserved byte " + std::to_string(i) + " is not 0";
  out.age_ms = get_le<std::uint32_t>(b.data() + 12);
  out.progress = get_le<std::uint64_t>(b.data());
  out.state = static_cast<PeerState>(state);
  out.leaving = flags == 1;
  return {};
}

std::string limits_fingerprint(const LinkLimits& l) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields, little-endian
  auto mix = [&](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(l.max_payload, 8);
  for (std::uint32_t f : l.fields) mix(f, 4);
  mix(l.options_digest, 8);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

FrameLimits FrameLimits::handshake_only() { return FrameLimits{}; }

FrameLimits FrameLimits::for_limits(const LinkLimits& s) {
  if (s.max_payload == 0 || s.max_payload > kMaxPayloadBytes)
    throw InvalidArgument("link limit 'max_payload' = " + std::to_string(s.max_payload) + " is outside 1.." +
                          std::to_string(kMaxPayloadBytes) + " (the " + std::to_string(kMaxPayloadBytes >> 30) +
                          " GiB frame ceiling)");
  FrameLimits l;
  l.max_payload = s.max_payload;
  return l;
}

FrameHeader control_header(FrameKind kind, std::span<const std::byte> payload) {
  FrameHeader h;
  h.kind = kind;
  h.payload_bytes = payload.size();
  h.payload_crc = crc32c(payload);
  return h;
}

HeaderBytes encode_header(const FrameHeader& h) {
  HeaderBytes b{};
  put_le<std::uint32_t>(b.data() + kOffMagic, kMagic);
  put_le<std::uint16_t>(b.data() + kOffVersion, kProtocolVersion);
  put_le<std::uint8_t>(b.data() + kOffKind, static_cast<std::uint8_t>(h.kind));
  put_le<std::uint64_t>(b.data() + kOffCall, h.tag.call);
  put_le<std::uint64_t>(b.data() + kOffStep, h.tag.step);
  put_le<std::uint32_t>(b.data() + kOffSchedule, h.tag.schedule);
  put_le<std::uint64_t>(b.data() + kOffPayload, h.payload_bytes);
  put_le<std::uint32_t>(b.data() + kOffCrc, h.payload_crc);
  return b;  // the reserved fields stay 0
}

std::string check_header(const FrameHeader& h, const FrameLimits& l) {
  const auto kind = static_cast<std::uint8_t>(h.kind);
  if (!known_kind(kind)) return field("kind", kind, "is not a known frame kind");
  const std::string k(to_string(h.kind));
  if (h.kind == FrameKind::data) {
    if (l.max_payload == 0) return field("kind", kind, "(DATA) before the handshake completed");
    if (h.tag.schedule == 0) return field("schedule", 0, "but a DATA frame names its schedule (1 or more)");
    if (h.payload_bytes > l.max_payload)
      return field("payload_bytes", h.payload_bytes, "exceeds the negotiated maximum " + std::to_string(l.max_payload));
    return {};
  }
  if (h.tag.schedule != 0) return field("schedule", h.tag.schedule, "but a " + k + " frame has 0");
  if (h.tag.call != 0) return field("call", h.tag.call, "but a " + k + " frame has 0");
  if (h.tag.step != 0) return field("step", h.tag.step, "but a " + k + " frame has 0");
  std::uint64_t lo = 0, hi = 0;
  switch (h.kind) {
    case FrameKind::hello: lo = hi = kHelloBytes; break;
    case FrameKind::auth: lo = hi = kAuthBytes; break;
    case FrameKind::bye: break;
    case FrameKind::ping: lo = hi = kPingBytes; break;
    case FrameKind::address: lo = 1, hi = kMaxAddressBytes; break;
    case FrameKind::peers: lo = 1, hi = kMaxPeersBytes; break;
    default: lo = kErrorPrefixBytes + 1, hi = kErrorPrefixBytes + kMaxErrorBytes; break;
  }
  if (h.payload_bytes < lo || h.payload_bytes > hi)
    return field("payload_bytes", h.payload_bytes,
                 lo == hi ? "but a " + k + " frame has " + std::to_string(lo)
                          : "but a " + k + " frame has " + std::to_string(lo) + ".." + std::to_string(hi));
  return {};
}

std::string try_decode_header(std::span<const std::byte> b, const FrameLimits& l, FrameHeader& out) {
  if (b.size() != kHeaderBytes)
    return "frame header is " + std::to_string(b.size()) + " bytes, expected " + std::to_string(kHeaderBytes);
  const auto magic = get_le<std::uint32_t>(b.data() + kOffMagic);
  if (magic != kMagic) return field("magic", magic, "is not ringattn's " + std::to_string(kMagic) + " (\"RATN\")");
  const auto version = get_le<std::uint16_t>(b.data() + kOffVersion);
  if (version != kProtocolVersion)
    return field("version", version, "but this build speaks protocol version " + std::to_string(kProtocolVersion));
  for (const auto& [off, bytes] : {std::pair{kOffReserved8, 1}, {kOffReserved32a, 4}, {kOffReserved32b, 4}}) {
    const std::uint32_t v = bytes == 1 ? get_le<std::uint8_t>(b.data() + off) : get_le<std::uint32_t>(b.data() + off);
    if (v != 0) return field("reserved", v, "at offset " + std::to_string(off) + " must be 0");
  }
  FrameHeader h;
  h.kind = static_cast<FrameKind>(get_le<std::uint8_t>(b.data() + kOffKind));
  h.tag.call = get_le<std::uint64_t>(b.data() + kOffCall);
  h.tag.step = get_le<std::uint64_t>(b.data() + kOffStep);
  h.tag.schedule = get_le<std::uint32_t>(b.data() + kOffSchedule);
  h.payload_bytes = get_le<std::uint64_t>(b.data() + kOffPayload);
  h.payload_crc = get_le<std::uint32_t>(b.data() + kOffCrc);
  std::string err = check_header(h, l);
  if (err.empty()) out = h;
  return err;
}

FrameHeader decode_header(std::span<const std::byte> bytes, const FrameLimits& limits) {
  FrameHeader h;
  std::string err = try_decode_header(bytes, limits, h);
  if (!err.empty()) throw NetworkError(err);
  return h;
}

}  // namespace ringattn::net
