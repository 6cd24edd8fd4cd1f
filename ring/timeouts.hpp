// ringattn — a caller's timeout in seconds, checked once and converted: RingOptions'
// timeout and connect_timeout, RINGATTN_TIMEOUT and RINGATTN_CONNECT_TIMEOUT, a
// RendezvousServer's and a LinkProbe's. Not installed.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "ringattn/error.hpp"

namespace ringattn::ring {

// 11.6 days: longer than any wait a ring means, and far from where seconds * 1000 stops
// fitting an int64 of milliseconds (a double beyond that range converts undefined).
inline constexpr double kMaxTimeoutSeconds = 1e6;

// `seconds` as milliseconds (rounded up, so a positive timeout never becomes 0), or
// InvalidArgument "<what> = <seconds> must be a finite number of seconds in (0, 1e6]"
// for zero, negative, NaN, inf or larger.
inline std::chrono::milliseconds timeout_ms(double seconds, const std::string& what) {
  if (!(seconds > 0) || !(seconds <= kMaxTimeoutSeconds))
    throw InvalidArgument(what + " = " + std::to_string(seconds) + " must be a finite number of seconds in (0, 1e6]");
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000)));
}

}  // namespace ringattn::ring
