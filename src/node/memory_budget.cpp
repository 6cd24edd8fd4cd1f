#include "memory_budget.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "ringattn/error.hpp"
#include "../plan/units.hpp"
#include "ringattn/layout.hpp"

namespace ringattn::node {
namespace {

// The kernel's sizes (kernels/block_attention.cpp): 256 x 512 tiles per thread, keys
// packed in chunks of 4096 as K^T, K and V.
constexpr double kTileQ = 256, kTileK = 512, kChunkKeys = 4096;

}  // namespace

std::string MemoryEstimate::breakdown() const {
  return "Q " + plan::format_bytes(q) + " + K/V buffers " + plan::format_bytes(kv_buffers) + " + (m, l, o) state " +
         plan::format_bytes(state) + " + kernel " + plan::format_bytes(kernel);
}

MemoryEstimate estimate_node_memory(const JobSpec& job) {
  const auto& c = job.attention;
  const double b = static_cast<double>(max_job_rows(job));
  const double h = static_cast<double>(c.heads), kvh = static_cast<double>(c.kv_heads), d = static_cast<double>(c.head_dim);
  const double elem = static_cast<double>(dtype_size(c.dtype));
  const double threads = c.threads > 0 ? c.threads : std::max(1u, std::thread::hardware_concurrency());
  MemoryEstimate m;
  m.q = b * h * d * elem;
  m.kv_buffers = (job.nodes > 1 ? 2.0 : 1.0) * 2.0 * b * kvh * d * elem;
  m.state = b * h * (d + 3) * 4.0;  // o, m, l and the lse output
  m.kernel = threads * (kTileQ * kTileK * (4 + 2) + kTileQ * d * (4 + elem)) + 3 * std::min(b, kChunkKeys) * kvh * d * elem;
  return m;
}

std::optional<double> available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return std::nullopt;
  char line[256];
  std::optional<double> kib;
  while (std::fgets(line, sizeof line, f)) {
    long long v = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &v) == 1) {
      kib = static_cast<double>(v);
      break;
    }
  }
  std::fclose(f);
  if (!kib) return std::nullopt;
  return *kib * 1024.0;
}

void check_memory(const JobSpec& job, int nodes_here, const std::string& who) {
  const auto avail = available_memory_bytes();
  if (!avail) return;  // not Linux /proc: nothing to compare with
  const MemoryEstimate m = estimate_node_memory(job);
  const double need = m.total() * nodes_here;
  if (need <= *avail) return;
  std::string msg = who + "this job needs about " + plan::format_bytes(m.total()) + " of memory per node (" + m.breakdown() + ")";
  if (nodes_here > 1)
    msg += ", " + plan::format_bytes(need) + " for the " + std::to_string(nodes_here) + " nodes on this machine";
  msg += ", but this machine has " + plan::format_bytes(*avail) +
         " available (MemAvailable in /proc/meminfo); spread it over more machines (--nodes, --hosts) or use "
         "shorter inputs";
  throw Error(msg);
}

}  // namespace ringattn::node
