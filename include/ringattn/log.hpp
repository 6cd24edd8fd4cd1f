// ringattn — what the library logs, and where it goes.
//
// The library writes a few lines of its own (a connection made, a peer dropped, a ring
// failed, the kernel's ISA path) through loggers named "net", "ring", "kern", "node"...
// By default they go to stderr as "[hh:mm:ss.mmm] [rank R] [net] warning: message". A
// program with its own logging hands the library a sink instead. The library never
// changes the level, pattern or sinks of any logger but its own.
#pragma once

#include <functional>
#include <string_view>

namespace ringattn {

enum class LogLevel : int { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 5 };

std::string_view to_string(LogLevel level);  // "trace", ..., "off"
// "trace", "debug", "info", "warn"/"warning", "error"/"err", "critical", "off"; throws
// InvalidArgument naming `what` and the value otherwise.
LogLevel parse_log_level(std::string_view text, std::string_view what = "log level");

// Receives every line at or above the level (from any thread, one line at a time).
using LogSink = std::function<void(LogLevel level, std::string_view logger, std::string_view message)>;
// An empty function: back to stderr. Once it returns, the old sink gets no more lines.
// A sink may call it itself (to replace or remove itself); it must not log through the
// library from inside a line.
void set_log_sink(LogSink sink);

void set_log_level(LogLevel level);                           // every logger (default: info)
void set_log_level(std::string_view logger, LogLevel level);  // one logger, e.g. "net"
// spdlog's SPDLOG_LEVEL syntax: "warn" or "warn,net=debug,kern=off".
void set_log_levels(std::string_view spec);
LogLevel log_level();

// Writes `message` as one line of logger `name` at `level`, through the library's own
// logging: a program's loggers ("run", "serve", "bench"...) then share the library's
// sink, format, rank and levels. log_enabled says whether such a line would be written
// (so a caller can skip formatting one that would not).
void log(LogLevel level, std::string_view name, std::string_view message);
bool log_enabled(LogLevel level, std::string_view name);

// The rank shown in the stderr format (-1 shows "coord": a launcher, before ranks exist).
void set_log_rank(int rank);

}  // namespace ringattn
