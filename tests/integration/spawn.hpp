// Integration tests — running the real `ringattn` binary as a user would.
//
// Each invocation gets its own process group, so that the test can (a) prove that
// every process the command started (the coordinator and its P nodes) has ended once
// the command returns, and (b) kill all of them if the command overruns its deadline
// or the test fails half-way: the group is SIGKILLed by the destructor whatever
// happens, so no test leaves a node running.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

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

// Runs `ringattn args...` with `env` added to the environment, waiting at most
// `deadline_seconds`. Never throws on a failing command; the test inspects the result.
Outcome run_ringattn(const std::vector<std::string>& args,
                     const std::vector<std::pair<std::string, std::string>>& env = {},
                     double deadline_seconds = 120);

}  // namespace ringattn::itest
