// ringattn — the tags of the runtime's frames. net/ moves opaque DATA frames under a tag
// (schedule, call, step: net/wire.hpp) and matches them to the receives that name it; what
// a schedule is, is said here, once.
//
// A schedule number says which frames of which exchange a frame is:
//
//   1 .. kMaxMessageType            a program's messages (Ring::send_message): the type
//   0xFFFF0000 | family << 8 | m    the runtime's own, by family:
//     family 0  collectives          m = collectives::Kind (a program's AllGather, ...)
//     family 1  Ulysses              m = collectives::Kind (the exchanges of forward_ulysses)
//     family 2  ring blocks          m = 1 K/V block (forward and backward), 2 gradient block
//     family 3  decode               m = collectives::Kind (the queries' all-gather, the partials'
//                                    reduce-scatter of Ring::decode)
//     family 4  link probe           m = 1
//
// The conflict rule (TransportConfig::conflict): collectives, Ulysses, ring blocks and
// decode run one call at a time in the same order on every rank, and a peer sends all of
// one call's frames before the next call's. So while a rank waits for such a frame, one of
// another family, another collective or another call from the same peer means the ranks
// have diverged (one rank in forward(), its neighbour in forward_ulysses()): the
// transport fails at once naming both frames, instead of holding the frame and timing
// out. A frame of the same call (a gradient block beside a K/V block) waits its turn, and
// messages are a program's own order: held, never refused.
#pragma once

#include <cstdint>
#include <string>

#include "net/transport.hpp"
#include "ringattn/messages.hpp"

namespace ringattn::ring {

inline constexpr std::uint32_t kRuntimeSchedules = kMaxMessageType + 1;  // 0xFFFF0000
static_assert(kRuntimeSchedules == 0xFFFF0000u);

enum class Family : std::uint32_t { collective = 0, ulysses = 1, blocks = 2, decode = 3, probe = 4, message = 0xFF };

constexpr std::uint32_t schedule(Family f, std::uint32_t member) {
  return kRuntimeSchedules | (static_cast<std::uint32_t>(f) << 8) | member;
}
Family family_of(std::uint32_t schedule);  // message for 1 .. kMaxMessageType

// The ring's own schedules.
inline constexpr std::uint32_t kKvBlock = schedule(Family::blocks, 1);
inline constexpr std::uint32_t kGradientBlock = schedule(Family::blocks, 2);
inline constexpr std::uint32_t kLinkProbe = schedule(Family::probe, 1);

// A tag in words, for messages: "the K/V block of call 3 step 1", "a message of type 7 (job 2)".
std::string describe(const net::Tag& t);

// "" or why `arrived` cannot belong with a receive of `waiting` (the rule above).
std::string conflict(const net::Tag& waiting, const net::Tag& arrived);

// Sets the config's conflict rule and tag names to these.
void use_frame_tags(net::TransportConfig& config);

}  // namespace ringattn::ring
