// ringattn — a ranks's heartbeat to the launcher that started it (report.hpp's ALIVE
// lines): `ringattn node` and the members of `ringattn generate` send one per interval, the
// count moving while the rank works, so the launcher's backstop follows progress.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "report.hpp"

namespace ringattn::node {

// "ALIVE <n>" every `interval` while the node runs: n moves while it reads, computes,
// moves blocks or writes, so the launcher's backstop is proportional to progress.
class Heartbeat {
 public:
  Heartbeat(std::chrono::milliseconds interval, std::function<std::uint64_t()> progress)
      : thread_([this, interval, progress = std::move(progress)] {
          std::unique_lock lock(mu_);
          while (!cv_.wait_for(lock, interval, [&] { return stop_; })) emit_line("ALIVE " + std::to_string(progress()));
        }) {}
  ~Heartbeat() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ringattn::node
