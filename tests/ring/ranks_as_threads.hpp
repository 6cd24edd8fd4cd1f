// The ring tests' harness: every rank a thread of this process with its own Ring on
// loopback (rank 0 serves the rendezvous on a free port).
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ringattn/ring.hpp"

namespace ringattn::test {

inline const std::string kToken = "ring-api-test-token-0123456789";

// Runs fn(rank) on one thread per rank; returns each rank's error message ("" if none).
inline std::vector<std::string> on_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline RingOptions options(int rank, int world, const std::string& master, double timeout = 20) {
  RingOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master = master;
  o.token = kToken;
  o.threads = 1;
  o.timeout = timeout;
  o.connect_timeout = 30;
  o.limits.max_rows = 1024;
  o.limits.max_heads = 8;
  o.limits.max_kv_heads = 8;
  o.limits.max_head_dim = 128;
  return o;
}

}  // namespace ringattn::test
