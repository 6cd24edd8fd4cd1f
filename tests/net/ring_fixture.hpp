// Test helpers: transports of a loopback ring, connected from threads of one process.
#pragma once

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/transport.hpp"

namespace ringattn::net::test {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline const std::string kSecret = "test-secret-0123456789abcdef";

// Blocks the size of K/V blocks of 2 KV heads of 16, fp32: a 32-byte prefix, then per row
// an 8-byte position and K and V (net sees only bytes under a tag).
inline constexpr std::uint32_t kSmallCols = 32;
inline constexpr std::uint32_t kSmallRows = 64;
inline constexpr std::uint32_t kBlocks = 7;  // the tests' schedule
inline std::uint64_t kv_bytes(std::uint32_t rows) { return 32 + std::uint64_t{rows} * (8 + 2 * kSmallCols * 4); }
inline Tag kv_header(std::uint64_t job, std::uint64_t step, std::uint32_t /*rows*/ = 0) { return {kBlocks, job, step}; }

inline LinkLimits small_shape() {
  LinkLimits s;
  s.max_payload = kv_bytes(kSmallRows);
  s.fields = {4, 2, 16, kSmallRows};
  s.names = {"max_heads", "max_kv_heads", "max_head_dim", "max_block_rows"};
  return s;
}

inline TransportConfig make_config(int rank, int world, milliseconds timeout = milliseconds(5000)) {
  TransportConfig c;
  c.rank = rank;
  c.world = world;
  c.ring_id = 42;
  c.limits = small_shape();
  c.secret = kSecret;
  c.connect_timeout = timeout;
  c.io_timeout = timeout;
  return c;
}

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs fn(rank) on one thread per rank; returns each rank's exception (null if none).
inline std::vector<std::exception_ptr> run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline std::string message_of(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  }
  return "unknown exception";
}

using Ring = std::vector<std::unique_ptr<Transport>>;

inline std::vector<PeerAddress> addresses(const Ring& ring) {
  std::vector<PeerAddress> peers;
  for (const auto& t : ring) peers.push_back({"127.0.0.1", t->listen_port()});
  return peers;
}

// Builds and connects a ring; configs[r] may be edited by `tweak` first.
inline Ring make_ring(int world, const std::function<void(TransportConfig&)>& tweak = {}) {
  Ring ring;
  for (int r = 0; r < world; ++r) {
    TransportConfig c = make_config(r, world);
    if (tweak) tweak(c);
    ring.push_back(make_tcp_transport(c));
  }
  const auto peers = addresses(ring);
  const auto errors = run_ranks(world, [&](int r) { ring[static_cast<std::size_t>(r)]->connect(peers); });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return ring;
}

// Closes every transport concurrently (as separate processes would).
inline void close_all(Ring& ring) {
  run_ranks(static_cast<int>(ring.size()), [&](int r) { ring[static_cast<std::size_t>(r)]->close(); });
}

// The float pattern of block `origin` at `step`, so a receiver can check every element.
inline void fill_block(std::vector<float>& v, int origin, std::uint64_t salt) {
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(origin * 1000003 + static_cast<int>(salt) * 7919) + static_cast<float>(i % 65536) * 0.5f;
}

inline std::span<const std::byte> bytes_of(const std::vector<float>& v, std::size_t elems) {
  return std::as_bytes(std::span(v.data(), elems));
}

}  // namespace ringattn::net::test
