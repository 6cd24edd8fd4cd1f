// The library's logging (core/logger.hpp, include/ringattn/log.hpp).
#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>

#include "core/logger.hpp"
#include "ringattn/split.hpp"
#include "ringattn/error.hpp"

namespace ringattn {
namespace {

spdlog::level::level_enum to_spdlog(LogLevel l) {
  switch (l) {
    case LogLevel::trace: return spdlog::level::trace;
    case LogLevel::debug: return spdlog::level::debug;
    case LogLevel::info: return spdlog::level::info;
    case LogLevel::warn: return spdlog::level::warn;
    case LogLevel::error: return spdlog::level::err;
    case LogLevel::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

LogLevel from_spdlog(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace: return LogLevel::trace;
    case spdlog::level::debug: return LogLevel::debug;
    case spdlog::level::info: return LogLevel::info;
    case spdlog::level::warn: return LogLevel::warn;
    case spdlog::level::err:
    case spdlog::level::critical: return LogLevel::error;
    default: return LogLevel::off;
  }
}

std::atomic<int> g_rank{-1};

// True on a thread while it is inside a user sink's call for one line.
thread_local bool t_in_sink = false;

class Sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // From any other thread: waits for the line in flight (spdlog holds mutex_ around each
  // line), so the old sink is never called once this returns. From inside a sink (it
  // replaces or removes itself): this thread already holds mutex_ for that line, so
  // taking it again would deadlock; the line in flight keeps its own copy of the old sink.
  void set(LogSink s) {
    auto next = s ? std::make_shared<const LogSink>(std::move(s)) : nullptr;
    if (t_in_sink) {
      std::lock_guard lock(user_mu_);
      user_ = std::move(next);
      return;
    }
    std::lock_guard lock(mutex_);
    std::lock_guard user_lock(user_mu_);
    user_ = std::move(next);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::string_view name(msg.logger_name.data(), msg.logger_name.size());
    if (name.rfind("ringattn.", 0) == 0) name.remove_prefix(9);
    const std::string_view text(msg.payload.data(), msg.payload.size());
    std::shared_ptr<const LogSink> user;
    {
      std::lock_guard lock(user_mu_);
      user = user_;
    }
    if (user) {
      t_in_sink = true;
      try {
        (*user)(from_spdlog(msg.level), name, text);
      } catch (...) {
        t_in_sink = false;
        throw;
      }
      t_in_sink = false;
      return;
    }
    const auto t = std::chrono::system_clock::to_time_t(msg.time);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count() % 1000;
    std::tm tm{};
    ::localtime_r(&t, &tm);
    const int rank = g_rank.load();
    char who[32];
    if (rank < 0) std::snprintf(who, sizeof who, "coord");
    else std::snprintf(who, sizeof who, "rank %d", rank);
    const std::string_view level = to_string(from_spdlog(msg.level));
    std::fprintf(stderr, "[%02d:%02d:%02d.%03d] [%s] [%.*s] %.*s: %.*s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                 static_cast<int>(ms), who, static_cast<int>(name.size()), name.data(),
                 static_cast<int>(level.size()), level.data(), static_cast<int>(text.size()), text.data());
  }
  void flush_() override { std::fflush(stderr); }

 private:
  std::mutex user_mu_;  // guards user_ alone (see set)
  std::shared_ptr<const LogSink> user_;
};

struct Registry {
  std::mutex mu;
  std::shared_ptr<Sink> sink = std::make_shared<Sink>();
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;
  std::map<std::string, LogLevel, std::less<>> levels;  // per logger, over the default
  LogLevel level = LogLevel::info;

  LogLevel level_of(std::string_view name) const {
    auto it = levels.find(name);
    return it == levels.end() ? level : it->second;
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may log during exit
  return *r;
}

}  // namespace

std::string_view to_string(LogLevel level) {
  switch (level) {
    case LogLevel::trace: return "trace";
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warning";
    case LogLevel::error: return "error";
    case LogLevel::off: return "off";
  }
  return "?";
}

LogLevel parse_log_level(std::string_view s, std::string_view what) {
  if (s == "trace") return LogLevel::trace;
  if (s == "debug") return LogLevel::debug;
  if (s == "info") return LogLevel::info;
  if (s == "warn" || s == "warning") return LogLevel::warn;
  if (s == "error" || s == "err" || s == "critical") return LogLevel::error;
  if (s == "off") return LogLevel::off;
  throw InvalidArgument(std::string(what) + " expects trace, debug, info, warn, error or off, got '" + std::string(s) + "'");
}

std::shared_ptr<spdlog::logger> logger(const std::string& name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  if (auto it = r.loggers.find(name); it != r.loggers.end()) return it->second;
  auto l = std::make_shared<spdlog::logger>("ringattn." + name, r.sink);
  l->set_level(to_spdlog(r.level_of(name)));
  l->flush_on(spdlog::level::warn);
  r.loggers.emplace(name, l);
  return l;
}

void set_log_sink(LogSink sink) { registry().sink->set(std::move(sink)); }

void log(LogLevel level, std::string_view name, std::string_view message) {
  if (level == LogLevel::off) return;
  logger(std::string(name))->log(to_spdlog(level), "{}", message);
}

bool log_enabled(LogLevel level, std::string_view name) {
  return level != LogLevel::off && logger(std::string(name))->should_log(to_spdlog(level));
}

void set_log_level(LogLevel level) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.level = level;
  r.levels.clear();
  for (auto& [name, l] : r.loggers) l->set_level(to_spdlog(level));
}

void set_log_level(std::string_view name, LogLevel level) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.levels[std::string(name)] = level;
  if (auto it = r.loggers.find(name); it != r.loggers.end()) it->second->set_level(to_spdlog(level));
}

void set_log_levels(std::string_view spec) {
  // Parse everything first: a bad spec changes nothing.
  LogLevel all = log_level();
  std::vector<std::pair<std::string, LogLevel>> each;
  for (const std::string& s : split_commas(spec)) {
    const std::string_view item = s;
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) all = parse_log_level(item, "SPDLOG_LEVEL");
    else each.emplace_back(std::string(item.substr(0, eq)), parse_log_level(item.substr(eq + 1), "SPDLOG_LEVEL"));
  }
  set_log_level(all);
  for (const auto& [name, level] : each) set_log_level(name, level);
}

LogLevel log_level() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  return r.level;
}

void set_log_rank(int rank) { g_rank = rank; }

}  // namespace ringattn
