// ringattn — the library's own loggers (internal; include/ringattn/log.hpp is the public
// side). Each is an spdlog logger named "ringattn.<name>" that is not in spdlog's global
// registry, writing to one sink: the caller's LogSink, or stderr with the rank in every
// line. So a program that uses spdlog itself keeps its own levels and patterns.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "ringattn/log.hpp"

namespace ringattn {

// The logger called `name` ("net", "ring", "kern", "node", "run", "cli", "bench"...),
// created on first use at the level set for it.
std::shared_ptr<spdlog::logger> logger(const std::string& name);

}  // namespace ringattn
