// ringattn — the coordinator behind `ringattn run`: checks that the job can run and
// publish (output paths, memory), serves the rendezvous its nodes find each other
// through, starts them with the launcher (launcher.hpp: token over stdin, reports,
// the first cause of a failure, signals), and assembles their output shards into O and
// lse in the original token order. If the coordinator itself is killed, the nodes die
// with it and a guard process removes the work directory (work_dir.hpp). O and lse are
// both written to temporary files first and published together, so a failed run
// leaves neither.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../node/job.hpp"

namespace ringattn::run {

struct NodeStats {
  int rank = 0;
  std::int64_t rows = 0;
  double total_seconds = 0, compute_seconds = 0, wait_seconds = 0, useful_flops = 0, io_cpu_seconds = 0;
  std::uint64_t bytes_sent = 0, payload_bytes_sent = 0;
  int steps_skipped = 0;
  std::int64_t max_rss_kib = 0;  // the node process's peak resident set
  std::string json;  // the node's STATS line as printed
};

struct RunOptions {
  std::string out_path;                // O, [tokens, heads, head_dim]
  std::string lse_path;                // lse, [tokens, heads]; empty: not written
  std::vector<std::string> hosts;      // host:port per rank; empty: loopback, free ports
  std::string launch_prefix;           // e.g. "ip netns exec ra{rank}": wraps each node command
  bool tls = false;                    // nodes encrypt their connections (--tls)
  bool quiet = false;                  // do not forward the nodes' log lines
};

struct RunResult {
  std::vector<NodeStats> nodes;
  double wall_seconds = 0;  // from spawning the nodes to the last exit
  double ring_seconds = 0;  // the slowest node's forward pass
};

// Throws Error naming the rank and cause of a failed job, or Interrupted
// (src/cli/commands.hpp) after a signal, once the nodes are stopped and the work
// directory is gone.
RunResult run_ring(const node::JobSpec& job, const RunOptions& opts);

}  // namespace ringattn::run
