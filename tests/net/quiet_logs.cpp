// The transport tests make hundreds of connections: log warnings and errors only, so a
// failing test's own output is not lost among "connected" lines (SPDLOG_LEVEL overrides).
#include <cstdlib>

#include "ringattn/log.hpp"

namespace {
const bool kQuiet = [] {
  if (const char* env = std::getenv("SPDLOG_LEVEL")) ringattn::set_log_levels(env);
  else ringattn::set_log_level(ringattn::LogLevel::warn);
  return true;
}();
}  // namespace
