// Integration tests — running the real `ringattn` binary as a user would.
//
// Each invocation gets its own process group, so that the test can (a) prove that
// every process the command started (the coordinator and its P nodes) has ended once
// the command returns, and (b) kill all of them if the command overruns its deadline
// or the test fails half-way: the group is SIGKILLed by the destructor whatever
// happens, so no test leaves a node running.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "tests/free_port.hpp"

namespace ringattn::itest {

struct Outcome {
  int exit_code = -1;             // exit status, 128 + signal, or -1 if killed at the deadline
  bool timed_out = false;         // the deadline passed and the group was killed
  bool group_empty = false;       // no process of the group was left once the command ended
  double wall_seconds = 0;
  std::string out, err;           // everything written to stdout / stderr

  // The lines of stderr that are not spdlog log lines ("[hh:mm:ss.mmm] [who] ..."):
  // the error lines the user is meant to read.
  std::vector<std::string> error_lines() const;
};

// Path of the binary under test: $RINGATTN_EXE (set by meson).
const std::string& ringattn_exe();

using Env = std::vector<std::pair<std::string, std::string>>;

// `ringattn args...` started in its own process group, for a test that acts on it while
// it runs (signals, a node killed); the group is SIGKILLed when the object goes.
class Spawned {
 public:
  Spawned(const std::vector<std::string>& args, const Env& env = {}, const std::string& exe = ringattn_exe());
  ~Spawned();
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;

  pid_t pid() const { return pid_; }
  // Reads what the command printed so far; true while it runs.
  bool pump();
  const std::string& out() const { return o_.out; }
  const std::string& err() const { return o_.err; }
  // Waits for the end (killing the group at the deadline) and returns the outcome.
  Outcome wait(double deadline_seconds);

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  int status_ = 0;
  bool exited_ = false;
  std::chrono::steady_clock::time_point started_;
  Outcome o_;
};

// Runs `ringattn args...` with `env` added to the environment, waiting at most
// `deadline_seconds`. Never throws on a failing command; the test inspects the result.
Outcome run_ringattn(const std::vector<std::string>& args, const Env& env = {}, double deadline_seconds = 120);

// The node processes `ringattn run` (pid) started: its children whose argv[1] is "node"
// (after any launcher prefix), as (pid, rank).
std::vector<std::pair<pid_t, int>> node_processes(pid_t run_pid);

// True while `pid` exists and is not a zombie.
bool process_alive(pid_t pid);

using test::free_port;  // a TCP port on 127.0.0.1 that was free a moment ago

}  // namespace ringattn::itest
