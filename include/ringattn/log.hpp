// ringattn — named spdlog loggers ("net", "ring", "kern", "node", "cli"), every line
// prefixed with the rank of the process. Header-only so kernels/ and net/ can log
// without depending on each other or on src/.
#pragma once

#include <memory>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace ringattn {

// The logger called `name`, created on first use (writes to stderr).
inline std::shared_ptr<spdlog::logger> logger(const std::string& name) {
  if (auto l = spdlog::get(name)) return l;
  try {
    return spdlog::stderr_color_mt(name);
  } catch (const spdlog::spdlog_ex&) {  // another thread created it first
    return spdlog::get(name);
  }
}

// Every logger, existing and future, prefixes its lines with this rank ("-" before a
// rank is known, e.g. in the coordinator).
inline void set_log_rank(int rank) {
  const std::string who = rank < 0 ? std::string("coord") : "rank " + std::to_string(rank);
  spdlog::set_pattern("[%H:%M:%S.%e] [" + who + "] [%n] %^%l%$: %v");
}

}  // namespace ringattn
