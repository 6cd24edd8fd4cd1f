// The same stream as the transport's, done with plain blocking sockets: same block
// sizes, same receive buffers and chunk sizes, same socket options, no framing, no CRC,
// no I/O thread. The gap between the two is the transport's own cost; the gap between
// this and iperf3 (whose 1 MiB buffer always sits in cache) is the memory system's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringattn::bench {

// GB/s of each of `reps` repetitions of `seconds` (after a short warm-up), streaming
// blocks of `block_bytes` from one thread to another over TCP on `host`, the receiver
// cycling through `depth` buffers.
std::vector<double> raw_tcp_gbps(const std::string& host, std::uint64_t block_bytes, int depth, int reps, double seconds);

}  // namespace ringattn::bench
