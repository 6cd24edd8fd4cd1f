// iperf3 on the same host in the same run: the reference single TCP stream of the link.
#pragma once

#include <optional>
#include <string>

namespace ringattn::bench {

inline constexpr const char* kIperf3Path = "/usr/bin/iperf3";

// Median GB/s (1e9 bytes) received over `runs` runs of `seconds` whole seconds, with
// writes of `write_len` (iperf3 -l, at most 1M for TCP) on `host`. nullopt if iperf3 is
// missing or every run failed.
std::optional<double> iperf3_gbps(const std::string& host, int runs, int seconds, const std::string& write_len);

}  // namespace ringattn::bench
