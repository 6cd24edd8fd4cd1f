// ringattn — the programs' loggers, on the public logging API (ringattn/log.hpp): the
// same sink, format, rank and levels as the library's own lines, with fmt's formatting
// ("job {} from {}", id, peer), checked at compile time like spdlog's.
//   cli::logger("serve")->info("job {} done", id);
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

#include "ringattn/log.hpp"

namespace ringattn::cli {

class Logger {
 public:
  explicit Logger(std::string name) : name_(std::move(name)) {}

  template <class... A>
  void debug(fmt::format_string<A...> f, A&&... a) const { write(LogLevel::debug, f, std::forward<A>(a)...); }
  template <class... A>
  void info(fmt::format_string<A...> f, A&&... a) const { write(LogLevel::info, f, std::forward<A>(a)...); }
  template <class... A>
  void warn(fmt::format_string<A...> f, A&&... a) const { write(LogLevel::warn, f, std::forward<A>(a)...); }
  template <class... A>
  void error(fmt::format_string<A...> f, A&&... a) const { write(LogLevel::error, f, std::forward<A>(a)...); }

  const Logger* operator->() const { return this; }  // logger("x")->info(...), as spdlog's

 private:
  template <class... A>
  void write(LogLevel level, fmt::format_string<A...> f, A&&... a) const {
    if (log_enabled(level, name_)) log(level, name_, fmt::format(f, std::forward<A>(a)...));
  }
  std::string name_;
};

inline Logger logger(std::string name) { return Logger(std::move(name)); }

}  // namespace ringattn::cli
