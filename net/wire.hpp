// The ringattn wire format (protocol version 5).
//
// A connection carries a stream of frames. A frame is a fixed 48-byte header followed
// by `payload_bytes` bytes of payload. Every integer is little-endian and is encoded and
// decoded byte by byte (never by copying a struct), so the format does not depend on
// the compiler, the padding or the host.
//
//   offset size field          meaning
//      0    4  magic          0x4E544152, the bytes "RATN": not a ringattn peer otherwise
//      4    2  version        kProtocolVersion; frames of another version are refused
//      6    1  kind           FrameKind below
//      7    1  reserved       0
//      8    8  call           DATA: the tag's call (the caller's number); control: 0
//     16    8  step           DATA: the tag's step (the caller's); control: 0
//     24    4  schedule       DATA: the tag's schedule (1 or more: the caller's vocabulary,
//                             which frames of a call are); control: 0
//     28    4  reserved       0
//     32    8  payload_bytes  length of the payload that follows
//     40    4  payload_crc    CRC32C (Castagnoli) of the payload
//     44    4  reserved       0
//
// Kinds and their payloads:
//   HELLO    (1)  the handshake hello, exactly kHelloBytes (see handshake.hpp)
//   AUTH     (2)  an HMAC-SHA256 proof, exactly 32 bytes (see handshake.hpp)
//   BYE      (3)  empty: the sender closes the connection politely
//   ERROR    (4)  why the sender gives up: origin rank u32 (0xFFFFFFFF unknown) | cause u8
//                 (ringattn::FailureCause) | 3 reserved zero bytes | 1..kMaxErrorBytes bytes
//                 of text. The origin is the rank the failure is attributed to, so a ring
//                 passes the first cause on instead of each rank's reaction to it.
//   PING     (5)  keep-alive, sent on every link that has been idle for a while, in both
//                 directions: progress u64 (the sender's progress counter) | state u8
//                 (idle 0, busy 1, waiting 2) | flags u8 (bit 0: leaving) | 2 reserved
//                 zero bytes | age u32 (ms since the freshest progress the sender knows
//                 of: its own or its wait chain's, net/liveness.hpp). Receiving it proves
//                 the peer's process is alive; a young age proves its chain advances.
//   ADDRESS  (6)  rendezvous: the sender's listen address as "host:port", 1..kMaxAddressBytes
//   PEERS    (7)  rendezvous: every rank's address, comma-separated, 1..kMaxPeersBytes
//   DATA     (16) opaque bytes for the caller, 0 .. the negotiated maximum (LinkLimits::
//                 max_payload), under a tag (schedule, call, step) that a receive names.
//                 What the bytes are and which sizes a tag may have is the caller's: net
//                 knows nothing of what travels (the ring's blocks: ring/block_layout.hpp).
//
// Validation. A receiver decodes a header with the FrameLimits that follow from the
// limits agreed in the HELLO (before the HELLO: control frames only). Every field is
// checked before it sizes or indexes anything: magic, version, kind, reserved, a control
// frame's payload size and zero tag, a DATA frame's schedule (not 0) and payload_bytes <=
// the negotiated maximum. So a hostile or corrupt header can never make a node allocate
// or read past a buffer; the schedules check their payloads' sizes against what the tag
// says they are before reading them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ringattn/error.hpp"

namespace ringattn::net {

inline constexpr std::uint32_t kMagic = 0x4E544152;  // "RATN" in little-endian bytes
inline constexpr std::uint16_t kProtocolVersion = 6;  // 4: MESSAGE frames; 5: one tagged DATA kind; 6: 5 limit fields
inline constexpr std::size_t kHeaderBytes = 48;
inline constexpr std::size_t kHelloBytes = 88;  // HELLO payload, laid out in handshake.hpp
inline constexpr std::size_t kAuthBytes = 32;   // AUTH payload: one HMAC-SHA256
inline constexpr std::size_t kMaxErrorBytes = 1024;  // text of an ERROR
inline constexpr std::size_t kErrorPrefixBytes = 8;  // origin, cause, reserved
inline constexpr std::size_t kPingBytes = 16;
inline constexpr std::size_t kMaxAddressBytes = 300;           // "host:port", a DNS name at most
inline constexpr std::size_t kMaxPeersBytes = 4096 * (kMaxAddressBytes + 1);
// A hard ceiling on any payload, whatever a job shape claims (a sanity bound; the
// negotiated limit is normally far lower).
inline constexpr std::uint64_t kMaxPayloadBytes = std::uint64_t{16} << 30;

enum class FrameKind : std::uint8_t { hello = 1, auth = 2, bye = 3, error = 4, ping = 5, address = 6, peers = 7, data = 16 };

std::string_view to_string(FrameKind k);  // "HELLO", ..., "KIND(n)" for unknown values
inline bool is_control(FrameKind k) { return static_cast<std::uint8_t>(k) < 16; }

// What a DATA frame is for: the caller's schedule (which kind of frame of which kind of
// call: 1 or more), the call's number and the step within it. A receive names the tag it
// waits for; frames are matched to receives by tag, not by arrival order.
struct Tag {
  std::uint32_t schedule = 0;
  std::uint64_t call = 0;
  std::uint64_t step = 0;
  friend bool operator==(const Tag&, const Tag&) = default;
};
// A receive's call that matches any call of its schedule and step (a program that learns
// the call number from the frame, like a message's job).
inline constexpr std::uint64_t kAnyCall = ~std::uint64_t{0};
inline bool matches(const Tag& wanted, const Tag& got) {
  return wanted.schedule == got.schedule && wanted.step == got.step && (wanted.call == kAnyCall || wanted.call == got.call);
}
std::string to_string(const Tag& t);  // "schedule 0xffff0201 call 3 step 1"

// The decoded header. magic, version and reserved are constants of the format and not
// stored here: encode writes them, decode checks them.
struct FrameHeader {
  FrameKind kind = FrameKind::data;
  Tag tag;  // DATA frames only
  std::uint64_t payload_bytes = 0;
  std::uint32_t payload_crc = 0;

  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

// What every rank of a ring agrees on when it connects; exchanged in the HELLO and
// compared field by field, so ranks started with other limits fail at once, naming the
// field. max_payload bounds every DATA frame before anything is allocated; the fields are
// the caller's own limits (the ring's: heads, K/V heads, head_dim, block rows), opaque
// numbers to net that it compares and names in messages by `names` (never sent).
inline constexpr std::size_t kLimitFields = 5;
struct LinkLimits {
  std::uint64_t max_payload = 1;  // largest DATA payload any rank sends or accepts
  std::array<std::uint32_t, kLimitFields> fields{};
  std::array<std::string_view, kLimitFields> names{};  // "max_heads", ...: for messages only
  std::uint64_t options_digest = 0;  // a hash of any further options the caller wants
                                     // compared (e.g. a launcher's job); opaque to net

  friend bool operator==(const LinkLimits& a, const LinkLimits& b) {
    return a.max_payload == b.max_payload && a.fields == b.fields && a.options_digest == b.options_digest;
  }
};

// 16 hex digits naming every field, so a launcher can tell which rank was started with
// other limits or another job without parsing error messages.
std::string limits_fingerprint(const LinkLimits& l);

// The acceptance bounds of incoming DATA frames.
struct FrameLimits {
  std::uint64_t max_payload = 0;  // largest DATA payload; 0: none accepted

  // Before the HELLO: control frames only, every DATA frame is refused.
  static FrameLimits handshake_only();
  // Throws InvalidArgument if max_payload is 0 or above kMaxPayloadBytes.
  static FrameLimits for_limits(const LinkLimits& limits);
};

using HeaderBytes = std::array<std::byte, kHeaderBytes>;

HeaderBytes encode_header(const FrameHeader& h);

// The header of a control frame (PING, BYE, ERROR, ADDRESS, PEERS) carrying `payload`.
FrameHeader control_header(FrameKind kind, std::span<const std::byte> payload);

// Decodes and validates. On success returns an empty string and sets `out`; otherwise
// returns a message naming the first bad field and its value, e.g.
// "frame field 'payload_bytes' = 96 but a PING frame has 16".
// No exceptions: this runs on the socket hot path.
std::string try_decode_header(std::span<const std::byte> bytes, const FrameLimits& limits, FrameHeader& out);

// The same, throwing NetworkError with that message.
FrameHeader decode_header(std::span<const std::byte> bytes, const FrameLimits& limits);

// Checks an outgoing header against the limits; the same message format.
std::string check_header(const FrameHeader& h, const FrameLimits& limits);

// The header of a DATA frame (payload size and CRC are filled in by the transport on send).
inline FrameHeader data_header(const Tag& tag) {
  FrameHeader h;
  h.tag = tag;
  return h;
}

// An ERROR payload as text fit for a log line or an exception: bytes outside printable
// ASCII become '?', so a peer cannot forge log lines or terminal escapes.
std::string error_text(std::span<const std::byte> payload);

// The ERROR payload (see the table above).
struct ErrorInfo {
  int origin = -1;  // -1: unknown
  FailureCause cause = FailureCause::unknown;
  std::string text;  // printable ASCII after decoding
};
std::string encode_error(const ErrorInfo& e);  // text cut to kMaxErrorBytes
// Decodes a payload whose size the header check already bounded; an unknown cause
// becomes `unknown`, a reserved byte that is not zero an error text.
ErrorInfo decode_error(std::span<const std::byte> payload);

// The PING payload.
enum class PeerState : std::uint8_t { idle = 0, busy = 1, waiting = 2 };
std::string_view to_string(PeerState s);  // "idle", "busy", "waiting"
struct PingInfo {
  std::uint64_t progress = 0;
  PeerState state = PeerState::idle;
  bool leaving = false;  // the rank asks to leave (a drain): byte 9, bit 0
  std::uint32_t age_ms = 0;  // bytes 12..15: how old the freshest progress it knows of is
};
std::array<std::byte, kPingBytes> encode_ping(const PingInfo& p);
// Returns "" or the bad field.
std::string try_decode_ping(std::span<const std::byte> payload, PingInfo& out);

}  // namespace ringattn::net
