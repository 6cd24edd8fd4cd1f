#include "ring/frame_tags.hpp"

namespace ringattn::ring {
namespace {

const char* collective_name(std::uint32_t m) {
  switch (m) {
    case 1: return "all-gather";
    case 2: return "reduce-scatter";
    case 3: return "all-reduce";
    case 4: return "all-to-all";
  }
  return "collective";
}

// Every rank runs these in the same order, one at a time.
bool lockstep(Family f) {
  return f == Family::collective || f == Family::ulysses || f == Family::blocks || f == Family::decode;
}

const char* family_name(Family f) {
  switch (f) {
    case Family::ulysses: return "a Ulysses call (schedule ulysses)";
    case Family::blocks: return "a ring call (forward/backward)";
    case Family::decode: return "a decode call";
    case Family::collective: return "a collective (all-gather, reduce-scatter, all-reduce, all-to-all)";
    default: return "another exchange";
  }
}

}  // namespace

Family family_of(std::uint32_t s) {
  if (s <= kMaxMessageType) return Family::message;
  const std::uint32_t f = (s >> 8) & 0xFF;
  return f <= static_cast<std::uint32_t>(Family::probe) ? static_cast<Family>(f) : Family::message;
}

std::string describe(const net::Tag& t) {
  const std::string call = std::to_string(t.call), step = std::to_string(t.step);
  const std::uint32_t m = t.schedule & 0xFF;
  if (t.schedule != 0 && t.schedule <= kMaxMessageType)
    return "a message of type " + std::to_string(t.schedule) + " (job " + call + ")";
  switch (family_of(t.schedule)) {
    case Family::collective:
    case Family::ulysses:
    case Family::decode: {
      const Family f = family_of(t.schedule);
      return std::string(f == Family::ulysses ? "Ulysses' " : f == Family::decode ? "decode's " : "the ") +
             collective_name(m) + " of call " + call + " step " + std::to_string(t.step >> 16) + " piece " +
             std::to_string(t.step & 0xFFFF);
    }
    case Family::blocks:
      if (m == 1) return "the K/V block of call " + call + " step " + step;
      if (m == 2) return "the gradient block of call " + call + " step " + step;
      break;
    case Family::probe: return "a link probe frame (step " + step + ")";
    case Family::message: break;
  }
  return net::to_string(t);
}

std::string conflict(const net::Tag& waiting, const net::Tag& arrived) {
  const Family w = family_of(waiting.schedule), a = family_of(arrived.schedule);
  if (!lockstep(w) || !lockstep(a)) return {};
  if (w != a)
    return std::string("the ranks are not making the same calls: this rank is in ") + family_name(w) + ", the peer in " +
           family_name(a);
  // A collective's kinds count their calls apart; a ring or decode call's frames share one.
  const bool one_count = w == Family::blocks || w == Family::decode;
  if (!one_count && waiting.schedule != arrived.schedule)
    return "every rank must call the same collectives in the same order";
  if (waiting.call != arrived.call)
    return "the ranks are not making the same calls in the same order (call " + std::to_string(waiting.call) +
           " here, " + std::to_string(arrived.call) + " there)";
  return {};
}

void use_frame_tags(net::TransportConfig& config) {
  config.conflict = conflict;
  config.tag_name = describe;
}

}  // namespace ringattn::ring
