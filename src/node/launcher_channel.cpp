#include "launcher_channel.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "ringattn/error.hpp"
#include "../cli/log.hpp"

namespace ringattn::node {

LauncherChannel::LauncherChannel(int rank) : rank_(rank) {
  std::thread([this] { read_loop(); }).detach();  // lives as long as the process
}

void LauncherChannel::read_loop() {
  std::string line;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        if (line.size() < (1u << 20)) line.push_back(buf[i]);
        continue;
      }
      {
        std::lock_guard lock(mu_);
        if (line.rfind("TOKEN ", 0) == 0) token_ = line.substr(6);
      }
      cv_.notify_all();
      line.clear();
    }
  }
  // The launcher is gone: nobody will read this node's output, and its peers die too.
  cli::logger("node")->error("rank {}: the launcher (ringattn run) is gone (its pipe closed); stopping", rank_);
  std::fflush(nullptr);
  ::_exit(1);
}

std::string LauncherChannel::wait_for(std::optional<std::string>& slot, const char* what, double timeout_seconds) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), [&] { return slot.has_value(); }))
    throw NetworkError("rank " + std::to_string(rank_) + ": no " + what + " line from the launcher within " +
                       std::to_string(static_cast<int>(timeout_seconds)) + " s");
  return *slot;
}

std::string LauncherChannel::token(double timeout_seconds) { return wait_for(token_, "TOKEN", timeout_seconds); }

}  // namespace ringattn::node
