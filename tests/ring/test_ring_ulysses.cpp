// Ring::forward_ulysses (include/ringattn/ring.hpp, ring/ulysses.hpp) as an embedding job
// uses it: ranks as threads of this process, against float64 dense attention — every
// world size 1-4, layout, mask and dtype, GQA with K/V heads split and replicated, uneven
// shards; calls of several shapes on one ring, and beside forward(); a call Ulysses cannot
// split, or ranks that disagree, refused on every rank with the ring still usable.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn/ring.hpp"
#include "tests/free_port.hpp"
#include "tests/ring/dense_problem.hpp"
#include "tests/ring/ranks_as_threads.hpp"

using namespace ringattn;
using test::on_ranks;
using test::Problem;
using test::tolerance;

namespace {

RingOptions mesh_options(int r, int world, const std::string& master, double timeout = 20) {
  RingOptions o = test::options(r, world, master, timeout);
  o.all_pairs = true;
  return o;
}

}  // namespace

TEST_CASE("ulysses: exact for every world size, layout, mask and dtype, K/V heads split and replicated, uneven shards") {
  for (int world : {1, 2, 3, 4}) {
    // heads/P query heads a rank: P = 2 one K/V head of two query heads each; P = 3 one of
    // two; P = 4 two query heads sharing one K/V head that two ranks both receive
    const std::int64_t heads = world == 3 ? 6 : world == 4 ? 8 : 4, kv_heads = world == 3 ? 3 : 2;
    for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
      for (Mask mask : {Mask::none(), Mask::causal(), Mask::sliding_window(37)})
        for (DType dtype : {DType::f32, DType::bf16}) {
          const Problem p(211, heads, kv_heads, 64, mask, dtype, 5);
          INFO("P=" << world << " " << to_string(layout) << " " << to_string(mask) << " " << to_string(dtype) << " heads "
                    << heads << "/" << kv_heads);
          std::vector<std::pair<double, double>> err(static_cast<std::size_t>(world));
          const std::string m = "127.0.0.1:" + std::to_string(test::free_port());
          const auto errors = on_ranks(world, [&](int r) {
            Ring ring = Ring::connect(mesh_options(r, world, m));
            err[static_cast<std::size_t>(r)] =
                p.run(ring, shard_positions(layout, p.tokens, world, r).materialize(), Schedule::ulysses);
          });
          for (int r = 0; r < world; ++r) {
            CHECK(errors[static_cast<std::size_t>(r)] == "");
            CHECK(err[static_cast<std::size_t>(r)].first <= tolerance(p));
            CHECK(err[static_cast<std::size_t>(r)].second <= 2e-5);
          }
        }
  }
}

TEST_CASE("ulysses: one ring, calls of several shapes, between forward() calls; MHA and MQA") {
  const int world = 2;
  const std::vector<Problem> calls = {
      Problem(300, 8, 2, 128, Mask::causal(), DType::f32, 11),           // GQA, K/V heads split
      Problem(96, 4, 4, 64, Mask::none(), DType::bf16, 12),              // MHA, bf16
      Problem(500, 2, 1, 32, Mask::sliding_window(64), DType::f32, 13),  // MQA: the one K/V head to both
  };
  std::vector<std::vector<std::pair<double, double>>> err(calls.size() * 2, std::vector<std::pair<double, double>>(world));
  const std::string m = "127.0.0.1:" + std::to_string(test::free_port());
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(mesh_options(r, world, m));
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const auto pos = shard_positions(Layout::zigzag, calls[i].tokens, world, r).materialize();
      err[2 * i][static_cast<std::size_t>(r)] = calls[i].run(ring, pos, Schedule::ulysses);
      err[2 * i + 1][static_cast<std::size_t>(r)] = calls[i].run(ring, pos);
    }
  });
  for (int r = 0; r < world; ++r) CHECK(errors[static_cast<std::size_t>(r)] == "");
  for (std::size_t i = 0; i < err.size(); ++i)
    for (int r = 0; r < world; ++r) {
      CAPTURE(i);
      CHECK(err[i][static_cast<std::size_t>(r)].first <= tolerance(calls[i / 2]));
      CHECK(err[i][static_cast<std::size_t>(r)].second <= 2e-5);
    }
}

TEST_CASE("ulysses: heads that do not split, and ranks that disagree, are refused on every rank; the ring stays usable") {
  const int world = 3;
  const Problem odd(90, 4, 2, 64, Mask::causal(), DType::f32, 21);    // 4 heads over 3 ranks
  const Problem mixed(90, 6, 1, 64, Mask::causal(), DType::f32, 22);  // 2 a rank, sharing a 6-head K/V group: fine
  const Problem good(90, 6, 3, 64, Mask::causal(), DType::f32, 23);
  const Problem other(90, 6, 3, 32, Mask::causal(), DType::f32, 23);  // another head_dim
  std::vector<std::string> why_odd(world), why_other(world);
  std::vector<std::pair<double, double>> after(world), mq(world);
  const std::string m = "127.0.0.1:" + std::to_string(test::free_port());
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(mesh_options(r, world, m));
    const auto pos = shard_positions(Layout::contiguous, 90, world, r).materialize();
    try {
      odd.run(ring, pos, Schedule::ulysses);
    } catch (const InvalidArgument& e) {
      why_odd[static_cast<std::size_t>(r)] = e.what();
    }
    mq[static_cast<std::size_t>(r)] = mixed.run(ring, pos, Schedule::ulysses);
    try {
      (r == 1 ? other : good).run(ring, pos, Schedule::ulysses);
    } catch (const InvalidArgument& e) {
      why_other[static_cast<std::size_t>(r)] = e.what();
    }
    after[static_cast<std::size_t>(r)] = good.run(ring, pos, Schedule::ulysses);
  });
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(why_odd[static_cast<std::size_t>(r)].find("4 query heads do not split over 3 ranks") != std::string::npos);
    CHECK(mq[static_cast<std::size_t>(r)].first <= 2e-5);
    CHECK_MESSAGE(why_other[static_cast<std::size_t>(r)].find("rank 1 calls with heads 6/3, head_dim 32") != std::string::npos,
                  why_other[static_cast<std::size_t>(r)]);
    CHECK(after[static_cast<std::size_t>(r)].first <= 2e-5);
  }
}

TEST_CASE("ulysses: a rank calling forward() meanwhile fails the call on every rank, naming what came") {
  const int world = 3;
  const Problem p(120, 6, 3, 64, Mask::causal(), DType::f32, 31);
  std::vector<std::string> seen(world);
  const std::string m = "127.0.0.1:" + std::to_string(test::free_port());
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(mesh_options(r, world, m, 5));
    const auto pos = shard_positions(Layout::contiguous, 120, world, r).materialize();
    try {
      if (r == 2)
        p.run(ring, pos);
      else
        p.run(ring, pos, Schedule::ulysses);
    } catch (const NetworkError& e) {
      seen[static_cast<std::size_t>(r)] = e.what();
    }
  });
  // A rank still in connect() (it waits for every pair's links) when the failure comes fails
  // there, with the same cause.
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    auto& s = seen[static_cast<std::size_t>(r)];
    if (s.empty()) s = errors[static_cast<std::size_t>(r)];
    CHECK_FALSE(s.empty());
  }
  // Whichever side refuses first names what came (the ring's conflict rule, frame_tags.hpp):
  // a K/V block where Ulysses' all-gather was awaited, or the reverse; every rank reports it.
  bool named = true;
  for (const auto& s : seen)
    named = named && s.find("the ranks are not making the same calls: this rank is in a") != std::string::npos &&
            (s.find("which sent the K/V block of call 1") != std::string::npos ||
             s.find("which sent Ulysses' all-gather of call 1") != std::string::npos);
  CHECK_MESSAGE(named, seen[0] << " | " << seen[1] << " | " << seen[2]);
}

TEST_CASE("ulysses: a peer that leaves mid-call fails every other rank, naming it") {
  const int world = 3;
  const Problem p(120, 6, 3, 64, Mask::none(), DType::f32, 41);
  std::vector<std::string> seen(world);
  const std::string m = "127.0.0.1:" + std::to_string(test::free_port());
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(mesh_options(r, world, m, 5));
    const auto pos = shard_positions(Layout::striped, 120, world, r).materialize();
    if (r == 1) {  // one call with the others, then gone in the middle of the next
      p.run(ring, pos, Schedule::ulysses);
      ring.close();
      return;
    }
    try {
      p.run(ring, pos, Schedule::ulysses);
      p.run(ring, pos, Schedule::ulysses);
    } catch (const NetworkError& e) {
      seen[static_cast<std::size_t>(r)] = e.what();
    }
  });
  for (int r : {0, 2}) {
    CAPTURE(r);
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK_MESSAGE(seen[static_cast<std::size_t>(r)].find("rank 1") != std::string::npos, seen[static_cast<std::size_t>(r)]);
  }
}
