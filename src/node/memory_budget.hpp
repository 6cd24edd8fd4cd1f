// ringattn — the memory a ring node will need, checked against what the machine has
// before anything is allocated, so that a huge input ends with both numbers and what to
// do, not with std::bad_alloc (or the OOM killer) half-way through a job.
#pragma once

#include <optional>
#include <string>

#include "job.hpp"

namespace ringattn::node {

// Bytes one node of `job` holds at its peak (the model of bench ring's RSS check):
// its Q shard, two K/V transfer buffers, the fp32 (m, l, o) state, lse, the kernel's
// per-thread tiles and packed key chunks. Computed in floating point: no overflow.
struct MemoryEstimate {
  double q = 0, kv_buffers = 0, state = 0, kernel = 0;
  double total() const { return q + kv_buffers + state + kernel; }
  std::string breakdown() const;  // "Q 1.07 GB + K/V buffers 537 MB + state 2.15 GB + kernel 12.6 MB"
};
MemoryEstimate estimate_node_memory(const JobSpec& job);

// MemAvailable from /proc/meminfo, or nullopt where it cannot be read.
std::optional<double> available_memory_bytes();

// Throws Error if `nodes_here` nodes of this job cannot fit in this machine's available
// memory, naming both numbers, the breakdown and what to do. `who` prefixes the message.
void check_memory(const JobSpec& job, int nodes_here, const std::string& who);

}  // namespace ringattn::node
