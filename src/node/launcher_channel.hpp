// ringattn — a node's end of the pipe from the launcher that started it (`ringattn run`):
// the per-job token arrives as a line (report.hpp), and the pipe then stays open for the
// whole job. When it ends, the launcher is gone — killed,
// crashed, or its ssh connection dropped — and the node stops at once instead of
// computing for nobody. (A local launcher also sets PR_SET_PDEATHSIG; over ssh only the
// pipe reaches the remote node.)
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

namespace ringattn::node {

class LauncherChannel {
 public:
  // Starts the reader thread on stdin.
  explicit LauncherChannel(int rank);
  LauncherChannel(const LauncherChannel&) = delete;
  LauncherChannel& operator=(const LauncherChannel&) = delete;

  // Wait for the TOKEN line; throw NetworkError after `timeout_seconds`.
  std::string token(double timeout_seconds);

 private:
  std::string wait_for(std::optional<std::string>& slot, const char* what, double timeout_seconds);
  void read_loop();

  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::string> token_;
};

}  // namespace ringattn::node
