// ringattn — the one launcher: starts P processes of this program (through an optional
// prefix such as `ssh host{rank}` or `ip netns exec ra{rank}`), hands each the job's
// token on its stdin, watches their reports (node/report.hpp) under one deadline, and
// when a rank fails, names the rank where the failure began (root_cause.hpp).
// `ringattn run` and `bench overlap` start their ranks with it, and pair it with a
// rendezvous (net/tcp/rendezvous.hpp) through which the ranks find each other.
//
// Failure policy: when a rank fails, the others learn of it from the ring within
// moments (an ERROR frame naming the first cause) and end too; any still running after
// a short grace — hung, stopped, or waiting on one that is — are killed. A rank stopped
// (SIGSTOP) for longer than the timeout is failed even if nobody waits on it. A backstop
// ends the job only if no rank reports progress for twice the timeout (the ranks' own
// deadlines fire long before). SIGINT, SIGTERM and SIGHUP kill the ranks and end the
// launch with cli::Interrupted.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "../node/report.hpp"

namespace ringattn::run {

class WorkDir;

struct LaunchSpec {
  int ranks = 1;
  std::string launch_prefix;  // words before the program, {rank} substituted; empty: none
  std::function<std::vector<std::string>(int rank)> arguments;  // the program's arguments
  std::string token;          // sent as the TOKEN line; empty: no line
  double timeout_seconds = 30;
  node::Ident expected;       // the fingerprints a rank started right reports (IDENT)
  bool quiet = false;         // do not forward the ranks' stderr
  WorkDir* work = nullptr;    // its guard kills the ranks if the launcher dies
  std::function<void(int rank, const std::string& line)> on_line;  // stdout lines not of report.hpp
};

// Each rank's STATS line (its JSON), in rank order, once every rank ended well. Throws
// Error naming the rank and cause of a failure, or cli::Interrupted after a signal.
std::vector<std::string> launch(const LaunchSpec& spec);

// This program's path (/proc/self/exe).
std::string self_exe();

}  // namespace ringattn::run
