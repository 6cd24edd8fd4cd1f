// What ring_service.cpp and ring_jobs.cpp both say: the events a client receives (one
// JSON object each) and the clock of their timings.
#pragma once

#include <chrono>
#include <string>

#include "../cli/json_object.hpp"

namespace ringattn::serve {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Events to the client: one JSON object each.
inline std::string event(const char* name, cli::JsonObject body = {}) {
  cli::JsonObject o;
  o.add("event", name).add("data", body);
  return o.str();
}

}  // namespace ringattn::serve
