// The public Ring (include/ringattn/ring.hpp) as an embedding job uses it: ranks as
// threads of this process, each with its own Ring on loopback (rank 0 serves the
// rendezvous on a free port), against float64 dense attention.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <new>
#include <random>
#include <thread>

#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn/log.hpp"
#include "ringattn/ring.hpp"
#include "src/oracle/random_inputs.hpp"
#include "src/oracle/reference.hpp"
#include "tests/free_port.hpp"
#include "tests/ring/dense_problem.hpp"
#include "tests/ring/ranks_as_threads.hpp"

using namespace ringattn;

// GCC 12 pairs the replaced operator new's malloc with the library's deletes and warns
// about a mismatch that is not one (both sides are replaced here).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// Large allocations (>= 16 KiB), counted process-wide when armed: the pooled buffers of
// a call must not be allocated again by the next call of the same shape.
namespace {
std::atomic<bool> g_count_large{false};
std::atomic<long> g_large_allocations{0};
std::atomic<std::size_t> g_large_sizes[16];
constexpr std::size_t kLarge = 16 << 10;
}  // namespace

void* operator new(std::size_t n) {
  if (g_count_large.load(std::memory_order_relaxed) && n >= kLarge) {
    const long i = g_large_allocations.fetch_add(1);
    if (i < 16) g_large_sizes[i] = n;
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The nothrow form too (std::stable_sort's temporary buffer uses it): otherwise it stays
// the runtime's while its delete is the free() above, which ASan rightly calls a mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return std::malloc(n ? n : 1); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using test::on_ranks;
using test::options;
using test::Problem;
using test::tolerance;


}  // namespace

TEST_CASE("ring api: exact for every world size, layout, mask and dtype, with uneven shards") {
  for (int world : {1, 2, 3, 4}) {
    const std::string master = "127.0.0.1:" + std::to_string(test::free_port());
    for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
      for (Mask mask : {Mask::none(), Mask::causal(), Mask::sliding_window(37)})
        for (DType dtype : {DType::f32, DType::bf16}) {
          const Problem p(211, 4, 2, 64, mask, dtype, 5);
          INFO("P=" << world << " " << to_string(layout) << " " << to_string(mask) << " " << to_string(dtype));
          std::vector<std::pair<double, double>> err(static_cast<std::size_t>(world));
          // A fresh ring each time keeps the cases independent; the reuse of one ring is below.
          const std::string m = "127.0.0.1:" + std::to_string(test::free_port());
          const auto errors = on_ranks(world, [&](int r) {
            Ring ring = Ring::connect(options(r, world, m));
            err[static_cast<std::size_t>(r)] = p.run(ring, shard_positions(layout, p.tokens, world, r).materialize());
          });
          for (int r = 0; r < world; ++r) {
            CHECK(errors[static_cast<std::size_t>(r)] == "");
            CHECK(err[static_cast<std::size_t>(r)].first <= tolerance(p));
            CHECK(err[static_cast<std::size_t>(r)].second <= 2e-5);
          }
        }
    (void)master;
  }
}

TEST_CASE("ring api: one ring, many calls: rows, heads, head_dim, dtype and mask change from call to call") {
  const int world = 3;
  const std::string master = "127.0.0.1:" + std::to_string(test::free_port());
  const std::vector<Problem> layers = {
      Problem(300, 8, 2, 128, Mask::causal(), DType::f32, 11),   // GQA
      Problem(96, 4, 4, 64, Mask::none(), DType::bf16, 12),       // MHA, bf16, fewer rows
      Problem(500, 2, 1, 32, Mask::sliding_window(64), DType::f32, 13),  // MQA, window
      Problem(300, 8, 2, 128, Mask::causal(), DType::f32, 14),   // the first shape again
  };
  std::vector<std::vector<std::pair<double, double>>> err(layers.size(), std::vector<std::pair<double, double>>(world));
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, master));
    for (std::size_t i = 0; i < layers.size(); ++i)
      err[i][static_cast<std::size_t>(r)] =
          layers[i].run(ring, shard_positions(Layout::zigzag, layers[i].tokens, world, r).materialize());
  });
  for (const auto& e : errors) CHECK(e == "");
  for (std::size_t i = 0; i < layers.size(); ++i)
    for (int r = 0; r < world; ++r) {
      INFO("layer " << i << " rank " << r);
      CHECK(err[i][static_cast<std::size_t>(r)].first <= tolerance(layers[i]));
    }
}

TEST_CASE("ring api: any increasing positions work: each block carries its own") {
  // Tokens dealt to 3 ranks at random: no layout, just strictly increasing per rank.
  const int world = 3;
  const Problem p(400, 4, 2, 64, Mask::causal(), DType::f32, 21);
  std::vector<std::vector<std::int64_t>> mine(world);
  std::mt19937 rng(7);
  for (std::int64_t t = 0; t < p.tokens; ++t) mine[rng() % world].push_back(t);
  const std::string master = "127.0.0.1:" + std::to_string(test::free_port());
  std::vector<std::pair<double, double>> err(world);
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, master));
    err[static_cast<std::size_t>(r)] = p.run(ring, mine[static_cast<std::size_t>(r)]);
  });
  for (int r = 0; r < world; ++r) {
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(err[static_cast<std::size_t>(r)].first <= 2e-5);
  }
}

TEST_CASE("ring api: a rank that calls with another shape fails the call on every rank, naming both") {
  const int world = 3;
  const std::string master = "127.0.0.1:" + std::to_string(test::free_port());
  const Problem right(120, 4, 2, 64, Mask::causal(), DType::f32, 31);
  const Problem wrong(120, 4, 2, 32, Mask::causal(), DType::f32, 31);
  std::vector<int> broken(world);
  const auto errors = on_ranks(world, [&](int r) {
    // A rank still finishing connect() when the others' first call fails learns of it
    // there: it never had a ring to keep (counted as broken), but it names the cause too.
    broken[static_cast<std::size_t>(r)] = 1;
    Ring ring = Ring::connect(options(r, world, master, 5));
    broken[static_cast<std::size_t>(r)] = 0;
    const auto pos = shard_positions(Layout::zigzag, right.tokens, world, r).materialize();
    try {
      (r == 1 ? wrong : right).run(ring, pos);
    } catch (...) {
      broken[static_cast<std::size_t>(r)] = ring.broken();
      throw;
    }
  });
  for (int r = 0; r < world; ++r) {
    const std::string& e = errors[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << e);
    CHECK(e.find("head_dim") != std::string::npos);
    CHECK(e.find("32") != std::string::npos);
    CHECK(e.find("64") != std::string::npos);
    CHECK(broken[static_cast<std::size_t>(r)]);
  }
}

TEST_CASE("ring api: ranks that pass overlapping positions fail the call on every rank, naming the position (forward and backward)") {
  const int world = 3;
  const Problem p(120, 4, 2, 32, Mask::none(), DType::f32, 37);
  for (const bool backward : {false, true}) {
    const std::string master = "127.0.0.1:" + std::to_string(test::free_port());
    const auto errors = on_ranks(world, [&](int r) {
      Ring ring = Ring::connect(options(r, world, master, 5));
      // Rank 2 passes rank 0's positions: without the check both return numbers, wrong ones.
      const auto good = shard_positions(Layout::contiguous, p.tokens, world, r).materialize();
      const auto pos = shard_positions(Layout::contiguous, p.tokens, world, r == 2 ? 0 : r).materialize();
      const std::size_t rows = pos.size();
      std::vector<float> q(rows * 4 * 32, 0.5f), k(rows * 2 * 32, 0.25f), v(k.size(), 1.0f), o(q.size()), lse(rows * 4);
      ring.forward({p.spec, q, k, v, backward ? good : pos}, o, lse);  // throws on every rank when !backward
      if (backward) {
        std::vector<float> d_o(q.size(), 1.0f), dq(q.size()), dk(k.size()), dv(v.size());
        ring.backward({p.spec, q, k, v, pos}, {o, lse, d_o, dq, dk, dv});
      }
    });
    for (int r = 0; r < world; ++r) {
      const std::string& e = errors[static_cast<std::size_t>(r)];
      INFO("rank " << r << ": " << e);
      CHECK(e.find("every global position belongs to one rank") != std::string::npos);
    }
  }
}

TEST_CASE("ring api: a call refused before sending (bad sizes, limits, positions, no rows) leaves the ring usable") {
  const int world = 2;
  const std::string master = "127.0.0.1:" + std::to_string(test::free_port());
  const Problem p(100, 4, 2, 64, Mask::none(), DType::f32, 41);
  std::vector<std::string> first(world), second(world), third(world);
  std::vector<double> err(world);
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, master));
    const auto pos = shard_positions(Layout::contiguous, p.tokens, world, r).materialize();
    std::vector<float> q(pos.size() * 4 * 64), kv(pos.size() * 2 * 64), o(q.size());
    try {  // o too small
      ring.forward({p.spec, q, kv, kv, pos}, std::span<float>(o).first(o.size() - 1));
    } catch (const InvalidArgument& e) {
      first[static_cast<std::size_t>(r)] = e.what();
    }
    std::vector<std::int64_t> backwards(pos.rbegin(), pos.rend());
    try {  // positions out of order
      ring.forward({p.spec, q, kv, kv, backwards}, o);
    } catch (const InvalidArgument& e) {
      second[static_cast<std::size_t>(r)] = e.what();
    }
    try {  // no rows: the wire carries no empty blocks
      ring.forward({p.spec, {}, {}, {}, {}}, {});
    } catch (const InvalidArgument& e) {
      third[static_cast<std::size_t>(r)] = e.what();
    }
    CHECK_FALSE(ring.broken());
    err[static_cast<std::size_t>(r)] = p.run(ring, pos).first;  // and it still works
  });
  for (int r = 0; r < world; ++r) {
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(first[static_cast<std::size_t>(r)].find("o has") != std::string::npos);
    CHECK(second[static_cast<std::size_t>(r)].find("strictly increase") != std::string::npos);
    CHECK(third[static_cast<std::size_t>(r)].find("0 rows") != std::string::npos);
    CHECK(err[static_cast<std::size_t>(r)] <= 2e-5);
  }
}

namespace {

void thirty_two_calls_allocate_nothing(DType dtype) {
  g_large_allocations = 0;
  const int world = 2;
  const std::string master = "127.0.0.1:" + std::to_string(test::free_port());
  const Problem p(512, 8, 2, 128, Mask::causal(), dtype, 51);
  std::vector<std::vector<float>> qr(world), kr(world), vr(world), o(world), lse(world);
  std::vector<std::vector<std::int64_t>> pos(world);
  for (int r = 0; r < world; ++r) {
    pos[r] = shard_positions(Layout::zigzag, p.tokens, world, r).materialize();
    qr[r] = Problem::rows(p.q, pos[r], 8 * 128);
    kr[r] = Problem::rows(p.k, pos[r], 2 * 128);
    vr[r] = Problem::rows(p.v, pos[r], 2 * 128);
    o[r].resize(qr[r].size());
    lse[r].resize(pos[r].size() * 8);
  }
  std::atomic<int> first_done{0}, all_done{0};
  std::atomic<bool> armed{false};
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, master));
    for (int call = 0; call < 32; ++call) {
      if (call == 1) {  // every rank finished its first call: count from here on
        ++first_done;
        while (first_done.load() < world) std::this_thread::yield();
        bool expected = false;
        if (armed.compare_exchange_strong(expected, true)) g_count_large = true;
      }
      ring.forward({p.spec, qr[r], kr[r], vr[r], pos[r]}, o[r], lse[r]);
    }
    // Stop counting before the rings close (closing frees and drains, which is not a call).
    ++all_done;
    while (all_done.load() < world) std::this_thread::yield();
    g_count_large = false;
  });
  for (const auto& e : errors) CHECK(e == "");
  std::string sizes;
  for (long i = 0; i < std::min(16L, g_large_allocations.load()); ++i) sizes += std::to_string(g_large_sizes[i]) + " ";
  INFO("sizes: " << sizes);
  CHECK(g_large_allocations.load() == 0);
}

}  // namespace

// bf16 converts K and V into the send buffer; fp32 sends them from the caller's arrays.
TEST_CASE("ring api: 32 calls of one shape allocate no buffer after the first (bf16)") {
  thirty_two_calls_allocate_nothing(DType::bf16);
}

TEST_CASE("ring api: 32 calls of one shape allocate no buffer after the first (fp32)") {
  thirty_two_calls_allocate_nothing(DType::f32);
}

TEST_CASE("ring api: a peer that leaves breaks the ring on the others, naming it; a new ring connects") {
  const int world = 3;
  const Problem p(150, 4, 2, 64, Mask::none(), DType::f32, 61);
  std::vector<int> broken(world);
  std::string master = "127.0.0.1:" + std::to_string(test::free_port());
  auto errors = on_ranks(world, [&](int r) {
    broken[static_cast<std::size_t>(r)] = 1;  // still inside connect() when it breaks: no ring to keep
    Ring ring = Ring::connect(options(r, world, master, 5));
    broken[static_cast<std::size_t>(r)] = 0;
    if (r == 1) {
      ring.close();  // leaves instead of calling
      return;
    }
    try {
      p.run(ring, shard_positions(Layout::contiguous, p.tokens, world, r).materialize());
    } catch (const NetworkError&) {
      broken[static_cast<std::size_t>(r)] = ring.broken();
      // Every later call says the ring is broken, and why.
      std::vector<float> none;
      std::vector<std::int64_t> nopos;
      try {
        ring.forward({p.spec, none, none, none, nopos}, none);
      } catch (const NetworkError& e) {
        CHECK(std::string(e.what()).find("this ring is broken") != std::string::npos);
      }
      throw;
    }
  });
  for (int r : {0, 2}) {
    INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
    CHECK(errors[static_cast<std::size_t>(r)].find("rank 1") != std::string::npos);
    CHECK(broken[static_cast<std::size_t>(r)]);
  }
  master = "127.0.0.1:" + std::to_string(test::free_port());
  std::vector<double> err(world);
  errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, master));
    err[static_cast<std::size_t>(r)] = p.run(ring, shard_positions(Layout::contiguous, p.tokens, world, r).materialize()).first;
  });
  for (int r = 0; r < world; ++r) {
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(err[static_cast<std::size_t>(r)] <= 2e-5);
  }
}

TEST_CASE("ring api: explicit peers instead of a rendezvous") {
  const int world = 2;
  const std::vector<std::string> peers = {"127.0.0.1:" + std::to_string(test::free_port()),
                                          "127.0.0.1:" + std::to_string(test::free_port())};
  const Problem p(64, 2, 1, 32, Mask::causal(), DType::f32, 71);
  std::vector<double> err(world);
  const auto errors = on_ranks(world, [&](int r) {
    RingOptions o = options(r, world, "");
    o.peers = peers;
    Ring ring = Ring::connect(o);
    err[static_cast<std::size_t>(r)] = p.run(ring, shard_positions(Layout::striped, p.tokens, world, r).materialize()).first;
  });
  for (int r = 0; r < world; ++r) {
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(err[static_cast<std::size_t>(r)] <= 2e-5);
  }
}

TEST_CASE("ring api: the library logs through the caller's sink, at the caller's level") {
  std::vector<std::string> lines;
  std::mutex mu;
  set_log_sink([&](LogLevel level, std::string_view logger, std::string_view message) {
    std::lock_guard lock(mu);
    lines.push_back(std::string(to_string(level)) + " " + std::string(logger) + " " + std::string(message));
  });
  set_log_level(LogLevel::info);
  const int world = 2;
  const std::string master = "127.0.0.1:" + std::to_string(test::free_port());
  const auto errors = on_ranks(world, [&](int r) { Ring ring = Ring::connect(options(r, world, master)); });
  set_log_sink({});
  set_log_level(LogLevel::warn);
  for (const auto& e : errors) CHECK(e == "");
  bool connected = false;
  for (const auto& l : lines) connected |= l.find("info net connected") == 0;
  CHECK(connected);
}

TEST_CASE("ring api: a program's own lines go through the same sink and levels (log, log_enabled)") {
  std::vector<std::string> lines;
  set_log_sink([&](LogLevel level, std::string_view logger, std::string_view message) {
    lines.push_back(std::string(to_string(level)) + " " + std::string(logger) + " " + std::string(message));
  });
  set_log_level(LogLevel::info);
  set_log_level("myjob", LogLevel::warn);
  log(LogLevel::info, "serve", "job 1 done");
  log(LogLevel::info, "myjob", "hidden");
  log(LogLevel::error, "myjob", "shown");
  log(LogLevel::off, "serve", "never");
  CHECK(log_enabled(LogLevel::info, "serve"));
  CHECK_FALSE(log_enabled(LogLevel::info, "myjob"));
  CHECK_FALSE(log_enabled(LogLevel::off, "serve"));
  set_log_sink({});
  set_log_level(LogLevel::warn);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "info serve job 1 done");
  CHECK(lines[1] == "error myjob shown");
}

// Issue 45: a Scope is an enum a caller can cast any integer to; every call taking one
// refuses the others before it indexes the mesh's per-scope arrays (3 entries).
TEST_CASE("ring api: a Scope other than ring, group or across is refused by every call taking one; so are a schedule out of range and the schedules a scope or decode cannot run") {
  Ring ring = Ring::connect(options(0, 1, ""));
  AttentionSpec spec;
  spec.heads = spec.kv_heads = 1;
  spec.head_dim = 64;
  KVCache cache(1, 64);
  std::vector<float> data(4);
  const std::vector<std::size_t> counts = {4};
  for (const int s : {3, -1, 1000}) {
    const auto bad = static_cast<Scope>(s);
    CAPTURE(s);
    const std::string scope = "scope " + std::to_string(s) + " is not Scope::ring, Scope::group or Scope::across";
    CHECK_THROWS_WITH_AS(ring.all_reduce(data, bad), doctest::Contains(("all_reduce: " + scope).c_str()), InvalidArgument);
    CHECK_THROWS_WITH_AS(ring.all_gather(data, counts, bad), doctest::Contains(("all_gather: " + scope).c_str()),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(ring.scope_rank(bad), doctest::Contains(("scope_rank: " + scope).c_str()), InvalidArgument);
    CHECK_THROWS_WITH_AS(ring.scope_size(bad), doctest::Contains(("scope_size: " + scope).c_str()), InvalidArgument);
    CHECK_THROWS_WITH_AS(ring.forward({spec, {}, {}, {}, {}, {}, Schedule::ring, bad}, {}), doctest::Contains(("forward: " + scope).c_str()),
                         InvalidArgument);
    CHECK_THROWS_WITH_AS(ring.backward({spec, {}, {}, {}, {}, {}, Schedule::ring, bad}, {{}, {}, {}, {}, {}, {}}),
                         doctest::Contains(("backward: " + scope).c_str()), InvalidArgument);
    CHECK_THROWS_WITH_AS(ring.decode({spec, {}, {}, {}, {}, {}, Schedule::ring, bad}, cache, {}), doctest::Contains(("decode: " + scope).c_str()),
                         InvalidArgument);
  }
  // The call description's other refusals: a schedule that is none of the three; Ulysses'
  // and the hybrid in a scope other than the whole ring; decode by another schedule.
  const auto odd = static_cast<Schedule>(7);
  CHECK_THROWS_WITH_AS(ring.forward({spec, {}, {}, {}, {}, {}, odd}, {}),
                       doctest::Contains("forward: schedule 7 is not one of ring, ulysses, hybrid"), InvalidArgument);
  CHECK_THROWS_WITH_AS(ring.backward({spec, {}, {}, {}, {}, {}, odd}, {}),
                       doctest::Contains("backward: schedule 7 is not one of ring, ulysses, hybrid"), InvalidArgument);
  for (const Schedule s : {Schedule::ulysses, Schedule::hybrid}) {
    CAPTURE(to_string(s));
    CHECK_THROWS_WITH_AS(ring.forward({spec, {}, {}, {}, {}, {}, s, Scope::group}, {}),
                         doctest::Contains("schedule spans the whole ring (scope ring)"), InvalidArgument);
    CHECK_THROWS_WITH_AS(ring.backward({spec, {}, {}, {}, {}, {}, s, Scope::across}, {}),
                         doctest::Contains("schedule spans the whole ring (scope ring)"), InvalidArgument);
    CHECK_THROWS_WITH_AS(ring.decode({spec, {}, {}, {}, {}, {}, s}, cache, {}),
                         doctest::Contains("schedule is not one decode runs by"), InvalidArgument);
  }
  CHECK_FALSE(ring.broken());
  for (const Scope s : {Scope::ring, Scope::group, Scope::across}) {
    CHECK(ring.scope_size(s) == 1);
    data = {1, 2, 3, 4};
    ring.all_reduce(data, s);  // a world of one: the sum is the data
    CHECK(data[3] == 4.0f);
  }
}

// Issue 45: seconds become integer milliseconds; inf, NaN or a huge value made that
// conversion undefined. One range everywhere: finite, in (0, 1e6].
TEST_CASE("ring api: timeouts must be finite seconds in (0, 1e6]; world_size at most 2^20") {
  for (const double bad : {0.0, -1.0, std::nan(""), HUGE_VAL, 1e300, 1e6 + 1}) {
    CAPTURE(bad);
    RingOptions o = options(0, 1, "");
    o.timeout = bad;
    CHECK_THROWS_WITH_AS(Ring::connect(o), doctest::Contains("RingOptions: timeout = "), InvalidArgument);
    o = options(0, 1, "");
    o.connect_timeout = bad;
    CHECK_THROWS_WITH_AS(Ring::connect(o), doctest::Contains("RingOptions: connect_timeout = "), InvalidArgument);
  }
  RingOptions o = options(0, 1, "");
  o.timeout = 1e6;
  o.connect_timeout = 1e-6;  // rounds up to 1 ms, never to 0
  Ring::connect(o).close();
  o = options(0, 2147483647, "127.0.0.1:1");
  CHECK_THROWS_WITH_AS(Ring::connect(o), doctest::Contains("world_size = 2147483647 must be in 1..1048576"),
                       InvalidArgument);
}
