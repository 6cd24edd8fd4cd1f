// The ringattn wire format (protocol version 4).
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
//      7    1  dtype          element type of a data payload (0 f32, 1 bf16); 0 for control
//      8    8  job_id         the caller's id of the pass/request; opaque to the transport
//     16    8  step           the caller's step counter; opaque to the transport
//     24    4  rows           data frames: matrix rows (tokens); control frames: 0
//     28    4  cols           data frames: matrix columns; control frames: 0
//     32    8  payload_bytes  length of the payload that follows
//     40    4  payload_crc    CRC32C (Castagnoli) of the payload
//     44    4  tag            MESSAGE frames: the message's type (1 or more), which the
//                             receiver checks; every other kind: 0 (reserved)
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
//                 (idle 0, busy 1, waiting 2) | 7 reserved zero bytes. Receiving it proves
//                 the peer's process is alive; a changing counter proves it is advancing.
//   ADDRESS  (6)  rendezvous: the sender's listen address as "host:port", 1..kMaxAddressBytes
//   PEERS    (7)  rendezvous: every rank's address, comma-separated, 1..kMaxPeersBytes
//   KV_BLOCK (16) a block of rows travelling the ring:
//                 (the layout and its arithmetic: net/block_layout.hpp)
//                   prefix   kBlockPrefixBytes, opaque to net (the caller's description of
//                            the call and the block: ring/block_format.hpp)
//                   tags     rows x i64 (the rows' global positions)
//                   groups   rows x i32, present or not (the rows' documents)
//                   K, V     rows x cols elements of dtype each, row-major
//                 cols <= max_kv_heads * max_head_dim
//   STATE    (17) one rows x cols fp32 matrix (e.g. online-softmax (o, m, l) rows), the
//                 row layout is the caller's; cols <= max_heads * (max_head_dim + 2)
//   QUERY    (18) decode tokens travelling to every rank (protocol 3):
//                   prefix   kBlockPrefixBytes, opaque to net (as for KV_BLOCK)
//                   tags     rows x i64 (the tokens' positions)
//                   groups   rows x i32 (the tokens' sequences)
//                   rows     rows x cols elements of dtype (each token's q, k, v)
//                 rows may be 0 (a rank with no token this step: the prefix alone);
//                 cols <= (max_heads + 2 * max_kv_heads) * max_head_dim
//   MESSAGE  (19) a typed message between ranks beside the ring's blocks (protocol 4):
//                 tag = its type (1 or more, the sender's and receiver's vocabulary; the
//                 receiver says which type it expects), rows = cols = dtype = 0, a payload
//                 of 0 .. the negotiated maximum bytes laid out by its type
//
// Validation. A receiver decodes a header with the FrameLimits that follow from the
// limits agreed in the HELLO (before the HELLO: control frames only). Every field is
// checked before it sizes or indexes anything: magic, version, kind, dtype, reserved,
// rows/cols against the limits, payload_bytes == a size implied by kind, rows, cols and
// dtype (multiplied overflow-safely), and payload_bytes <= the negotiated maximum. So a
// hostile or corrupt header can never make a node allocate or read past a buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "net/block_layout.hpp"
#include "ringattn/error.hpp"
#include "ringattn/types.hpp"

namespace ringattn::net {

inline constexpr std::uint32_t kMagic = 0x4E544152;  // "RATN" in little-endian bytes
inline constexpr std::uint16_t kProtocolVersion = 4;  // 3: QUERY frames (decode); 4: MESSAGE frames
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

enum class FrameKind : std::uint8_t {
  hello = 1, auth = 2, bye = 3, error = 4, ping = 5, address = 6, peers = 7, kv_block = 16, state = 17, query = 18,
  message = 19
};

std::string_view to_string(FrameKind k);  // "HELLO", ..., "KIND(n)" for unknown values
inline bool is_control(FrameKind k) { return static_cast<std::uint8_t>(k) < 16; }

// The decoded header. magic, version and reserved are constants of the format and not
// stored here: encode writes them, decode checks them.
struct FrameHeader {
  FrameKind kind = FrameKind::kv_block;
  DType dtype = DType::f32;
  std::uint64_t job_id = 0;
  std::uint64_t step = 0;
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  std::uint64_t payload_bytes = 0;
  std::uint32_t payload_crc = 0;
  std::uint32_t tag = 0;  // MESSAGE frames only: the message's type

  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

// What every rank of a ring agrees on when it connects; exchanged in the HELLO and
// compared field by field. They bound every frame of every later call, before anything
// is allocated; the frame limits follow from them.
struct LinkLimits {
  std::uint32_t max_heads = 1;       // query heads of a call
  std::uint32_t max_kv_heads = 1;    // K/V heads of a call
  std::uint32_t max_head_dim = 1;
  std::uint32_t max_block_rows = 1;  // most rows in one KV_BLOCK or STATE frame
  std::uint64_t options_digest = 0;  // a hash of any further options the caller wants
                                     // compared (e.g. a launcher's job); opaque to net

  friend bool operator==(const LinkLimits&, const LinkLimits&) = default;
};

// 16 hex digits naming every field, so a launcher can tell which rank was started with
// other limits or another job without parsing error messages.
std::string limits_fingerprint(const LinkLimits& l);

// The acceptance bounds of incoming data frames.
struct FrameLimits {
  std::uint32_t max_rows = 0;
  std::uint32_t max_kv_cols = 0;     // most cols of a KV_BLOCK
  std::uint32_t max_state_cols = 0;  // most cols of a STATE
  std::uint32_t max_query_cols = 0;  // most cols of a QUERY
  std::uint64_t max_payload = 0;     // largest data payload the limits allow

  // Before the HELLO: control frames only, every data frame is refused.
  static FrameLimits handshake_only();
  // Throws InvalidArgument naming the field if a limit is 0 or the frames too large.
  static FrameLimits for_limits(const LinkLimits& limits);
};

using HeaderBytes = std::array<std::byte, kHeaderBytes>;

HeaderBytes encode_header(const FrameHeader& h);

// The header of a control frame (PING, BYE, ERROR, ADDRESS, PEERS) carrying `payload`.
FrameHeader control_header(FrameKind kind, std::span<const std::byte> payload);

// Decodes and validates. On success returns an empty string and sets `out`; otherwise
// returns a message naming the first bad field and its value, e.g.
// "frame field 'cols' = 96 but a KV_BLOCK has kv_heads*head_dim = 128 columns".
// No exceptions: this runs on the socket hot path.
std::string try_decode_header(std::span<const std::byte> bytes, const FrameLimits& limits, FrameHeader& out);

// The same, throwing NetworkError with that message.
FrameHeader decode_header(std::span<const std::byte> bytes, const FrameLimits& limits);

// Checks an outgoing header against the limits; the same message format.
std::string check_header(const FrameHeader& h, const FrameLimits& limits);

// Payload size of a data frame, or 0 with `ok` false on overflow or a control kind. A
// KV_BLOCK has two valid sizes: without and (`with_groups`) with the group column; a
// QUERY always has its group column (with_groups is ignored).
std::uint64_t data_payload_bytes(FrameKind kind, DType dtype, std::uint32_t rows, std::uint32_t cols, bool with_groups,
                                 bool& ok);

// Header of a KV_BLOCK of `rows` rows of `cols` = kv_heads * head_dim columns (payload
// size and CRC are filled in by the transport on send).
FrameHeader kv_block_header(DType dtype, std::uint32_t cols, std::uint64_t job_id, std::uint64_t step,
                            std::uint32_t rows, bool with_groups = false);

// Payload bytes of such a block: prefix + tags [+ groups] + K + V.
std::uint64_t kv_block_bytes(DType dtype, std::uint32_t cols, std::uint32_t rows, bool with_groups = false);


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
};
std::array<std::byte, kPingBytes> encode_ping(const PingInfo& p);
// Returns "" or the bad field.
std::string try_decode_ping(std::span<const std::byte> payload, PingInfo& out);

}  // namespace ringattn::net
