// ringattn — which rank a failed ring job failed at, and why, from what every node
// said and how every node ended.
//
// When one rank fails, its neighbours fail a moment later with their reaction to it
// ("connection reset", "peer aborted"); whichever process exits first is an accident
// of scheduling. So the launcher waits for all of them, then picks the cause by
// evidence, strongest first:
//   1. a node killed by a signal the launcher did not send (kill -9, the OOM killer);
//   2. a node stopped by a signal (SIGSTOP) while its peers gave up on it;
//   3. a node started with another job or token than the launcher's (fingerprints):
//      the misconfigured rank, whichever side of its handshakes noticed first;
//   4. a node that exited non-zero without a report (it crashed, or died abruptly);
//   5. the nodes' own reports, ranked by cause (a rank's own failure, a bad frame, a
//      disagreement, authentication, a stall, silence, a closed connection): the rank
//      most of the strongest reports blame, the lowest on a tie.
// The answer is the same however the nodes' exits interleave.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "../node/report.hpp"
#include "child_process.hpp"

namespace ringattn::run {

struct NodeEnd {
  int rank = 0;
  std::optional<ExitStatus> exit;          // nullopt: still running when the launcher gave up
  int stop_signal = 0;                     // stopped when it ended the job (SIGSTOP, ...)
  std::optional<node::Ident> ident;
  std::optional<node::FailReport> report;
  std::string last_error_line;             // its last line on stderr
};

struct RootCause {
  int rank = -1;
  std::string message;  // one line: "rank 1 was killed by signal 9 (SIGKILL)", ...
};

// `expected` holds the launcher's own fingerprints; `timeout_seconds` is quoted for a
// stopped node.
RootCause find_root_cause(const std::vector<NodeEnd>& nodes, const node::Ident& expected, double timeout_seconds);

}  // namespace ringattn::run
