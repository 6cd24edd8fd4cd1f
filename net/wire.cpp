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
constexpr std::size_t kOffMagic = 0, kOffVersion = 4, kOffKind = 6, kOffDtype = 7, kOffJob = 8, kOffStep = 16,
                      kOffRows = 24, kOffCols = 28, kOffPayload = 32, kOffCrc = 40, kOffTag = 44;

bool known_kind(std::uint8_t k) {
  switch (static_cast<FrameKind>(k)) {
    case FrameKind::hello:
    case FrameKind::auth:
    case FrameKind::bye:
    case FrameKind::error:
    case FrameKind::ping:
    case FrameKind::address:
    case FrameKind::peers:
    case FrameKind::kv_block:
    case FrameKind::state:
    case FrameKind::query:
    case FrameKind::message: return true;
  }
  return false;
}

bool known_dtype(std::uint8_t d) { return d == static_cast<std::uint8_t>(DType::f32) || d == static_cast<std::uint8_t>(DType::bf16); }

std::string field(std::string_view name, std::uint64_t value, std::string_view why) {
  return "frame field '" + std::string(name) + "' = " + std::to_string(value) + " " + std::string(why);
}

bool mul_ok(std::uint64_t a, std::uint64_t b, std::uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

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
    case FrameKind::kv_block: return "KV_BLOCK";
    case FrameKind::state: return "STATE";
    case FrameKind::query: return "QUERY";
    case FrameKind::message: return "MESSAGE";
  }
  return "KIND(unknown)";
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
  return b;
}

std::string try_decode_ping(std::span<const std::byte> b, PingInfo& out) {
  if (b.size() != kPingBytes) return "PING payload is " + std::to_string(b.size()) + " bytes, expected 16";
  const auto state = get_le<std::uint8_t>(b.data() + 8);
  if (state > static_cast<std::uint8_t>(PeerState::waiting))
    return "PING field 'state' = " + std::to_string(state) + " is not a known state";
  const auto flags = get_le<std::uint8_t>(b.data() + 9);
  if (flags > 1) return "PING field 'flags' = " + std::to_string(flags) + " has bits other than 'leaving'";
  for (std::size_t i = 10; i < kPingBytes; ++i)
    if (b[i] != std::byte{0}) return "PING reserved byte " + std::to_string(i) + " is not 0";
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
  mix(l.max_heads, 4);
  mix(l.max_kv_heads, 4);
  mix(l.max_head_dim, 4);
  mix(l.max_block_rows, 4);
  mix(l.options_digest, 8);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

FrameLimits FrameLimits::handshake_only() { return FrameLimits{}; }

FrameLimits FrameLimits::for_limits(const LinkLimits& s) {
  auto bad = [](std::string_view f, std::uint64_t v, std::string_view why) {
    throw InvalidArgument("ring limit '" + std::string(f) + "' = " + std::to_string(v) + " " + std::string(why));
  };
  if (s.max_heads == 0) bad("max_heads", s.max_heads, "must be >= 1");
  if (s.max_kv_heads == 0) bad("max_kv_heads", s.max_kv_heads, "must be >= 1");
  if (s.max_head_dim == 0) bad("max_head_dim", s.max_head_dim, "must be >= 1");
  if (s.max_block_rows == 0) bad("max_block_rows", s.max_block_rows, "must be >= 1");
  FrameLimits l;
  l.max_rows = s.max_block_rows;
  std::uint64_t kv_cols = 0, state_cols = 0, query_cols = 0;
  if (!mul_ok(s.max_kv_heads, s.max_head_dim, kv_cols) || kv_cols > std::numeric_limits<std::uint32_t>::max())
    bad("max_head_dim", s.max_head_dim, "makes max_kv_heads*max_head_dim overflow 32 bits");
  if (!mul_ok(s.max_heads, std::uint64_t{s.max_head_dim} + 2, state_cols) ||
      state_cols > std::numeric_limits<std::uint32_t>::max())
    bad("max_head_dim", s.max_head_dim, "makes max_heads*(max_head_dim+2) overflow 32 bits");
  if (!mul_ok(std::uint64_t{s.max_heads} + 2 * std::uint64_t{s.max_kv_heads}, s.max_head_dim, query_cols) ||
      query_cols > std::numeric_limits<std::uint32_t>::max())
    bad("max_head_dim", s.max_head_dim, "makes (max_heads+2*max_kv_heads)*max_head_dim overflow 32 bits");
  l.max_kv_cols = static_cast<std::uint32_t>(kv_cols);
  l.max_query_cols = static_cast<std::uint32_t>(query_cols);
  l.max_state_cols = static_cast<std::uint32_t>(state_cols);
  bool ok_kv = false, ok_state = false, ok_query = false;
  const std::uint64_t kv = data_payload_bytes(FrameKind::kv_block, DType::f32, l.max_rows, l.max_kv_cols, true, ok_kv);
  const std::uint64_t st = data_payload_bytes(FrameKind::state, DType::f32, l.max_rows, l.max_state_cols, false, ok_state);
  const std::uint64_t qu = data_payload_bytes(FrameKind::query, DType::f32, l.max_rows, l.max_query_cols, true, ok_query);
  if (!ok_kv || !ok_state || !ok_query || kv > kMaxPayloadBytes || st > kMaxPayloadBytes || qu > kMaxPayloadBytes)
    bad("max_block_rows", s.max_block_rows,
        "makes a block larger than the " + std::to_string(kMaxPayloadBytes >> 30) + " GiB frame ceiling");
  l.max_payload = std::max({kv, st, qu});
  return l;
}

std::uint64_t data_payload_bytes(FrameKind kind, DType dtype, std::uint32_t rows, std::uint32_t cols, bool with_groups,
                                 bool& ok) {
  std::uint64_t n = 0;
  if (kind == FrameKind::state) {
    ok = mul_ok(rows, cols, n) && mul_ok(n, 4, n);
    return ok ? n : 0;
  }
  if (kind != FrameKind::query && kind != FrameKind::kv_block) {
    ok = false;
    return 0;
  }
  const BlockLayout l = kind == FrameKind::query ? BlockLayout::query(dtype, cols, rows)
                                                 : BlockLayout::kv(dtype, cols, rows, with_groups);
  ok = l.fits;
  return l.bytes();
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
  put_le<std::uint8_t>(b.data() + kOffDtype, static_cast<std::uint8_t>(h.dtype));
  put_le<std::uint64_t>(b.data() + kOffJob, h.job_id);
  put_le<std::uint64_t>(b.data() + kOffStep, h.step);
  put_le<std::uint32_t>(b.data() + kOffRows, h.rows);
  put_le<std::uint32_t>(b.data() + kOffCols, h.cols);
  put_le<std::uint64_t>(b.data() + kOffPayload, h.payload_bytes);
  put_le<std::uint32_t>(b.data() + kOffCrc, h.payload_crc);
  put_le<std::uint32_t>(b.data() + kOffTag, h.tag);
  return b;
}

std::string check_header(const FrameHeader& h, const FrameLimits& l) {
  const auto kind = static_cast<std::uint8_t>(h.kind);
  if (!known_kind(kind)) return field("kind", kind, "is not a known frame kind");
  const auto dt = static_cast<std::uint8_t>(h.dtype);
  if (!known_dtype(dt)) return field("dtype", dt, "is not a known dtype (0 f32, 1 bf16)");
  const std::string k(to_string(h.kind));
  if (h.kind != FrameKind::message && h.tag != 0)
    return field("reserved", h.tag, "must be 0 (only a MESSAGE frame has a tag there)");
  if (is_control(h.kind)) {
    if (h.rows != 0) return field("rows", h.rows, "but a " + k + " frame has 0");
    if (h.cols != 0) return field("cols", h.cols, "but a " + k + " frame has 0");
    if (h.dtype != DType::f32) return field("dtype", dt, "but a " + k + " frame has 0");
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
  if (l.max_payload == 0) return field("kind", kind, "(" + k + ") before the handshake completed");
  if (h.kind == FrameKind::message) {  // a typed payload: any length up to the negotiated maximum
    if (h.tag == 0) return field("tag", h.tag, "but a MESSAGE names its type (1 or more)");
    if (h.rows != 0) return field("rows", h.rows, "but a MESSAGE frame has 0");
    if (h.cols != 0) return field("cols", h.cols, "but a MESSAGE frame has 0");
    if (h.dtype != DType::f32) return field("dtype", dt, "but a MESSAGE frame has 0");
  } else if (h.kind == FrameKind::query) {  // the only data frame that may have 0 rows
    if (h.rows > l.max_rows)
      return field("rows", h.rows, "is outside 0.." + std::to_string(l.max_rows) + " (max_block_rows)");
    if (h.cols == 0 || h.cols > l.max_query_cols)
      return field("cols", h.cols,
                   "is outside 1.." + std::to_string(l.max_query_cols) + " ((max_heads+2*max_kv_heads)*max_head_dim)");
    bool ok = false;
    const std::uint64_t want = data_payload_bytes(h.kind, h.dtype, h.rows, h.cols, true, ok);
    if (!ok || want != h.payload_bytes)
      return field("payload_bytes", h.payload_bytes,
                   "but a QUERY of these rows and cols has " + (ok ? std::to_string(want) : std::string("overflow")));
  } else if (h.rows == 0 || h.rows > l.max_rows) {
    return field("rows", h.rows, "is outside 1.." + std::to_string(l.max_rows) + " (max_block_rows)");
  } else if (h.kind == FrameKind::kv_block) {
    if (h.cols == 0 || h.cols > l.max_kv_cols)
      return field("cols", h.cols, "is outside 1.." + std::to_string(l.max_kv_cols) + " (max_kv_heads*max_head_dim)");
    bool ok = false, ok_g = false;
    const std::uint64_t plain = data_payload_bytes(h.kind, h.dtype, h.rows, h.cols, false, ok);
    const std::uint64_t grouped = data_payload_bytes(h.kind, h.dtype, h.rows, h.cols, true, ok_g);
    if (!ok || !ok_g || (h.payload_bytes != plain && h.payload_bytes != grouped))
      return field("payload_bytes", h.payload_bytes,
                   "but a KV_BLOCK of these rows and cols has " +
                       (ok && ok_g ? std::to_string(plain) + " or " + std::to_string(grouped) : std::string("overflow")));
  } else {
    if (h.cols == 0 || h.cols > l.max_state_cols)
      return field("cols", h.cols, "is outside 1.." + std::to_string(l.max_state_cols) + " (max_heads*(max_head_dim+2))");
    if (h.dtype != DType::f32) return field("dtype", dt, "but a STATE is always fp32 (0)");
    bool ok = false;
    const std::uint64_t want = data_payload_bytes(h.kind, h.dtype, h.rows, h.cols, false, ok);
    if (!ok || want != h.payload_bytes)
      return field("payload_bytes", h.payload_bytes,
                   "but rows*cols*4 = " + (ok ? std::to_string(want) : std::string("overflow")));
  }
  if (h.payload_bytes > l.max_payload)
    return field("payload_bytes", h.payload_bytes, "exceeds the negotiated maximum " + std::to_string(l.max_payload));
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
  FrameHeader h;
  h.tag = get_le<std::uint32_t>(b.data() + kOffTag);
  h.kind = static_cast<FrameKind>(get_le<std::uint8_t>(b.data() + kOffKind));
  h.dtype = static_cast<DType>(get_le<std::uint8_t>(b.data() + kOffDtype));
  h.job_id = get_le<std::uint64_t>(b.data() + kOffJob);
  h.step = get_le<std::uint64_t>(b.data() + kOffStep);
  h.rows = get_le<std::uint32_t>(b.data() + kOffRows);
  h.cols = get_le<std::uint32_t>(b.data() + kOffCols);
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

FrameHeader kv_block_header(DType dtype, std::uint32_t cols, std::uint64_t job_id, std::uint64_t step,
                            std::uint32_t rows, bool with_groups) {
  FrameHeader h;
  h.kind = FrameKind::kv_block;
  h.dtype = dtype;
  h.job_id = job_id;
  h.step = step;
  h.rows = rows;
  h.cols = cols;
  h.payload_bytes = kv_block_bytes(dtype, cols, rows, with_groups);
  return h;
}

std::uint64_t kv_block_bytes(DType dtype, std::uint32_t cols, std::uint32_t rows, bool with_groups) {
  bool ok = false;
  return data_payload_bytes(FrameKind::kv_block, dtype, rows, cols, with_groups, ok);
}

}  // namespace ringattn::net
