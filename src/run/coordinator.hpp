// ringattn — the coordinator behind `ringattn run`: starts P node processes, tells
// them each other's ports, watches them under one deadline, and assembles their
// output shards into O and lse in the original token order.
//
// Failure policy: the first node that exits non-zero is the root cause. The others
// are expected to fail on their own at once (their transport gets an ERROR frame or
// EOF); any still running after a short grace are killed. The error names the
// rank and repeats that node's own one-line error. Outputs are written to a temporary
// file and renamed only when every node succeeded, so a failed run leaves nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/node/job.hpp"

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
  bool quiet = false;                  // do not forward the nodes' log lines
};

struct RunResult {
  std::vector<NodeStats> nodes;
  double wall_seconds = 0;  // from spawning the nodes to the last exit
  double ring_seconds = 0;  // the slowest node's forward pass
};

RunResult run_ring(const node::JobSpec& job, const RunOptions& opts);

}  // namespace ringattn::run
