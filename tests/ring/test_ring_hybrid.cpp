// Ring::forward_hybrid (include/ringattn/ring.hpp, ring/hybrid.hpp): Ulysses inside each
// group of a mesh, the ring across the groups, against float64 dense attention — meshes of
// 2-4 ranks in groups of 1, 2 and 4, every layout, mask and dtype, GQA with K/V heads split
// and replicated, uneven shards, packed documents (Ulysses' too); hybrid, Ulysses and ring calls on one ring; a call the
// groups cannot split refused on every rank with the ring still usable; a rank in another
// schedule failing every rank, naming it.
#include <doctest/doctest.h>

#include <array>
#include <limits>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn/packing.hpp"
#include "ringattn/ring.hpp"
#include "src/oracle/random_inputs.hpp"
#include "src/oracle/reference.hpp"
#include "tests/free_port.hpp"
#include "tests/ring/dense_problem.hpp"
#include "tests/ring/ranks_as_threads.hpp"

using namespace ringattn;
using test::on_ranks;
using test::Problem;
using test::tolerance;

namespace {

RingOptions mesh_options(int r, int world, int group, const std::string& master, double timeout = 20) {
  RingOptions o = test::options(r, world, master, timeout);
  o.group_size = group;
  return o;
}

std::string fresh_master() { return "127.0.0.1:" + std::to_string(test::free_port()); }

}  // namespace

TEST_CASE("hybrid: exact on meshes of 2-4 ranks in groups of 1, 2 and 4, every layout, mask and dtype, GQA") {
  struct Mesh {
    int world, group;
    std::int64_t heads, kv_heads;
  };
  // (4, 2): two groups of two, 2 query heads a rank over one K/V head; (2, 2) MQA: the one
  // K/V head replicated to both; (4, 4): Ulysses alone; (3, 1): the ring alone.
  for (const Mesh mesh : {Mesh{4, 2, 4, 2}, Mesh{2, 2, 4, 1}, Mesh{4, 4, 8, 2}, Mesh{3, 1, 4, 2}})
    for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped})
      for (Mask mask : {Mask::none(), Mask::causal(), Mask::sliding_window(37)})
        for (DType dtype : {DType::f32, DType::bf16}) {
          const Problem p(211, mesh.heads, mesh.kv_heads, 64, mask, dtype, 7);
          INFO("P=" << mesh.world << " groups of " << mesh.group << " " << to_string(layout) << " " << to_string(mask)
                    << " " << to_string(dtype) << " heads " << mesh.heads << "/" << mesh.kv_heads);
          std::vector<std::pair<double, double>> err(static_cast<std::size_t>(mesh.world));
          const std::string m = fresh_master();
          const auto errors = on_ranks(mesh.world, [&](int r) {
            Ring ring = Ring::connect(mesh_options(r, mesh.world, mesh.group, m));
            err[static_cast<std::size_t>(r)] =
                p.run(ring, shard_positions(layout, p.tokens, mesh.world, r).materialize(), Schedule::hybrid);
          });
          for (int r = 0; r < mesh.world; ++r) {
            CHECK(errors[static_cast<std::size_t>(r)] == "");
            CHECK(err[static_cast<std::size_t>(r)].first <= tolerance(p));
            CHECK(err[static_cast<std::size_t>(r)].second <= 2e-5);
          }
        }
}

TEST_CASE("hybrid: one mesh, hybrid, Ulysses and ring calls of several shapes in turn") {
  const int world = 4, group = 2;
  const std::vector<Problem> calls = {
      Problem(300, 8, 2, 128, Mask::causal(), DType::f32, 11),
      Problem(96, 4, 4, 64, Mask::none(), DType::bf16, 12),
      Problem(500, 2, 1, 32, Mask::sliding_window(64), DType::f32, 13),
  };
  std::vector<std::vector<std::pair<double, double>>> err(calls.size() * 3, std::vector<std::pair<double, double>>(world));
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(mesh_options(r, world, group, m));
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const auto pos = shard_positions(Layout::zigzag, calls[i].tokens, world, r).materialize();
      err[3 * i][static_cast<std::size_t>(r)] = calls[i].run(ring, pos, Schedule::hybrid);
      err[3 * i + 1][static_cast<std::size_t>(r)] = calls[i].run(ring, pos);
      if (calls[i].heads % world == 0)
        err[3 * i + 2][static_cast<std::size_t>(r)] = calls[i].run(ring, pos, Schedule::ulysses);
    }
  });
  for (int r = 0; r < world; ++r) CHECK(errors[static_cast<std::size_t>(r)] == "");
  for (std::size_t i = 0; i < err.size(); ++i)
    for (int r = 0; r < world; ++r) {
      CAPTURE(i);
      CHECK(err[i][static_cast<std::size_t>(r)].first <= tolerance(calls[i / 3]));
      CHECK(err[i][static_cast<std::size_t>(r)].second <= 2e-5);
    }
}

TEST_CASE("hybrid: heads the groups cannot split and groups too long for a block are refused on every rank; the ring stays usable") {
  const int world = 4, group = 2;
  const Problem odd(90, 3, 1, 64, Mask::causal(), DType::f32, 21);  // 3 heads over groups of 2
  const Problem good(90, 4, 2, 64, Mask::causal(), DType::f32, 23);
  const Problem longer(700, 4, 2, 64, Mask::causal(), DType::f32, 24);  // 350 rows a group, 175 a rank
  std::vector<std::string> why_odd(world), why_long(world);
  std::vector<std::pair<double, double>> after(world);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    RingOptions o = mesh_options(r, world, group, m);
    o.limits.max_rows = 300;
    Ring ring = Ring::connect(o);
    try {
      odd.run(ring, shard_positions(Layout::contiguous, 90, world, r).materialize(), Schedule::hybrid);
    } catch (const InvalidArgument& e) {
      why_odd[static_cast<std::size_t>(r)] = e.what();
    }
    try {
      longer.run(ring, shard_positions(Layout::zigzag, 700, world, r).materialize(), Schedule::hybrid);
    } catch (const InvalidArgument& e) {
      why_long[static_cast<std::size_t>(r)] = e.what();
    }
    after[static_cast<std::size_t>(r)] =
        good.run(ring, shard_positions(Layout::zigzag, 90, world, r).materialize(), Schedule::hybrid);
  });
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK_MESSAGE(why_odd[static_cast<std::size_t>(r)].find("3 query heads do not split over 2 ranks") != std::string::npos,
                  why_odd[static_cast<std::size_t>(r)]);
    CHECK_MESSAGE(why_long[static_cast<std::size_t>(r)].find("the group's 350 rows exceed limits().max_rows = 300") !=
                      std::string::npos,
                  why_long[static_cast<std::size_t>(r)]);
    CHECK(after[static_cast<std::size_t>(r)].first <= 2e-5);
  }
  RingOptions bad = mesh_options(0, 4, 3, m);
  CHECK_THROWS_WITH_AS(Ring::connect(bad), doctest::Contains("group_size = 3 must divide the world size 4"), InvalidArgument);
}

TEST_CASE("hybrid: a rank calling forward() meanwhile fails every rank, naming what came; nothing hangs") {
  const int world = 4, group = 2;
  const Problem p(120, 4, 2, 64, Mask::causal(), DType::f32, 31);
  std::vector<std::string> seen(world);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(mesh_options(r, world, group, m, 5));
    const auto pos = shard_positions(Layout::contiguous, 120, world, r).materialize();
    try {
      if (r == 3)
        p.run(ring, pos);
      else
        p.run(ring, pos, Schedule::hybrid);
    } catch (const NetworkError& e) {
      seen[static_cast<std::size_t>(r)] = e.what();
    }
  });
  bool named = false;
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    auto& s = seen[static_cast<std::size_t>(r)];
    if (s.empty()) s = errors[static_cast<std::size_t>(r)];
    CHECK_FALSE(s.empty());
    named = named || s.find("the ranks are not making the same calls") != std::string::npos;
  }
  CHECK_MESSAGE(named, seen[0] << " | " << seen[1] << " | " << seen[2] << " | " << seen[3]);
}

TEST_CASE("documents: Ulysses and the hybrid keep each query within its document, against float64") {
  // Six documents of uneven lengths, packed and sharded by shard_documents (uneven shards).
  const std::vector<std::int64_t> cu = {0, 50, 51, 170, 230, 300, 361};
  const std::int64_t n = cu.back(), H = 4, KH = 2, D = 64;
  const auto ids = document_ids(cu);
  for (DType dtype : {DType::f32, DType::bf16})
    for (Mask mask : {Mask::none(), Mask::causal()}) {
      auto q = oracle::random_normal(static_cast<std::size_t>(n * H * D), 41);
      auto k = oracle::random_normal(static_cast<std::size_t>(n * KH * D), 42);
      auto v = oracle::random_normal(static_cast<std::size_t>(n * KH * D), 43);
      if (dtype == DType::bf16) {
        oracle::round_to_bf16(q);
        oracle::round_to_bf16(k);
        oracle::round_to_bf16(v);
      }
      std::vector<double> ref_o(q.size()), ref_lse(static_cast<std::size_t>(n * H));
      const auto all = Positions::contiguous(0, n);
      oracle::dense_attention_f64({H, KH, D, mask, 0.0}, q.data(), all, k.data(), v.data(), all, ref_o.data(),
                                  ref_lse.data(), ids.data(), ids.data());
      const AttentionSpec spec{H, KH, D, dtype, mask, 0};
      for (const int world : {2, 4})
        for (const int group : {1, 2, world}) {
          if (world % group != 0 || (group == 1 && world == 4)) continue;
          INFO("P=" << world << " groups of " << group << " " << to_string(mask) << " " << to_string(dtype));
          const auto shards = shard_documents(cu, world);
          std::vector<double> err(static_cast<std::size_t>(world));
          const std::string m = fresh_master();
          const auto errors = on_ranks(world, [&](int r) {
            Ring ring = Ring::connect(mesh_options(r, world, group, m));
            const auto& sh = shards[static_cast<std::size_t>(r)];
            const auto& pos = sh.positions;
            std::vector<std::int32_t> docs;
            for (auto p : pos) docs.push_back(ids[static_cast<std::size_t>(p)]);
            const auto qr = Problem::rows(q, pos, H * D), kr = Problem::rows(k, pos, KH * D),
                       vr = Problem::rows(v, pos, KH * D);
            std::vector<float> o(qr.size()), lse(pos.size() * static_cast<std::size_t>(H));
            if (group == world)
              ring.forward({spec, qr, kr, vr, pos, docs, Schedule::ulysses}, o, lse);
            else
              ring.forward({spec, qr, kr, vr, pos, docs, Schedule::hybrid}, o, lse);
            double e = 0;
            for (std::size_t i = 0; i < pos.size(); ++i)
              for (std::int64_t x = 0; x < H * D; ++x)
                e = std::max(e, std::fabs(o[i * static_cast<std::size_t>(H * D) + static_cast<std::size_t>(x)] -
                                          ref_o[static_cast<std::size_t>(pos[i] * H * D + x)]));
            err[static_cast<std::size_t>(r)] = e;
          });
          for (int r = 0; r < world; ++r) {
            CHECK(errors[static_cast<std::size_t>(r)] == "");
            CHECK(err[static_cast<std::size_t>(r)] <= (dtype == DType::bf16 ? 1e-2 : 2e-5));
          }
        }
    }
}

TEST_CASE("mesh collectives: all_reduce and all_gather over the ring, a group and across, every rank the same bits") {
  for (const auto& [world, group] : {std::pair{4, 2}, std::pair{3, 1}, std::pair{2, 2}}) {
    CAPTURE(world);
    CAPTURE(group);
    std::vector<std::vector<float>> reduced(static_cast<std::size_t>(world) * 3), gathered(reduced.size());
    std::vector<std::array<int, 6>> places(static_cast<std::size_t>(world));
    const std::string m = fresh_master();
    const auto errors = on_ranks(world, [&](int r) {
      Ring ring = Ring::connect(mesh_options(r, world, group, m));
      for (const Scope s : {Scope::ring, Scope::group, Scope::across}) {
        const auto i = static_cast<std::size_t>(r) * 3 + static_cast<std::size_t>(s);
        places[static_cast<std::size_t>(r)][2 * static_cast<std::size_t>(s)] = ring.scope_rank(s);
        places[static_cast<std::size_t>(r)][2 * static_cast<std::size_t>(s) + 1] = ring.scope_size(s);
        auto& v = reduced[i];
        v.resize(1001);
        for (std::size_t e = 0; e < v.size(); ++e) v[e] = 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(e);
        ring.all_reduce(v, s);
        // Uneven chunks: scope rank j contributes j + 2 floats of value 100 j + e.
        const int n = ring.scope_size(s), me = ring.scope_rank(s);
        std::vector<std::size_t> counts;
        for (int j = 0; j < n; ++j) counts.push_back(static_cast<std::size_t>(j + 2));
        auto& g = gathered[i];
        g.assign(static_cast<std::size_t>((n + 3) * n / 2), -1.0f);
        std::size_t at = static_cast<std::size_t>((me + 3) * me / 2);
        for (int e = 0; e < me + 2; ++e) g[at + static_cast<std::size_t>(e)] = static_cast<float>(100 * me + e);
        ring.all_gather(g, counts, s);
        if (r == 0) {
          std::vector<float> short_data(3);
          CHECK_THROWS_WITH_AS(ring.all_gather(short_data, counts, s), doctest::Contains("the counts add up to"),
                               InvalidArgument);
          // Counts that add up to data.size() only modulo 2^64 (a hostile tester's): refused
          // before any block is cut, not a read past the array or a write in front of it.
          if (n >= 2) {
            std::vector<std::size_t> wrapping(static_cast<std::size_t>(n), 0);
            wrapping[0] = g.size() + 16;  // past the end, the next count wrapping the sum back
            wrapping[1] = std::numeric_limits<std::size_t>::max() - 15;
            CHECK_THROWS_WITH_AS(ring.all_gather(g, wrapping, s), doctest::Contains("add up to more than"), InvalidArgument);
            wrapping[0] = 1;  // the first block fits; the second starts in the array and wraps
            wrapping[1] = std::numeric_limits<std::size_t>::max();
            if (n >= 3) wrapping[2] = g.size();
            CHECK_THROWS_WITH_AS(ring.all_gather(g, wrapping, s), doctest::Contains("add up to more than"), InvalidArgument);
          }
        }
      }
    });
    for (int r = 0; r < world; ++r) CHECK(errors[static_cast<std::size_t>(r)] == "");
    for (int r = 0; r < world; ++r) {
      const auto& p = places[static_cast<std::size_t>(r)];
      CHECK(p[0] == r);
      CHECK(p[1] == world);
      CHECK(p[2] == r % group);
      CHECK(p[3] == group);
      CHECK(p[4] == r / group);
      CHECK(p[5] == world / group);
      for (const Scope s : {Scope::ring, Scope::group, Scope::across}) {
        // The ranks of this rank's scope: their sum, and the same bits on each of them.
        std::vector<int> members;
        for (int q = 0; q < world; ++q)
          if (s == Scope::ring || (s == Scope::group && q / group == r / group) || (s == Scope::across && q % group == r % group))
            members.push_back(q);
        const auto& mine = reduced[static_cast<std::size_t>(r) * 3 + static_cast<std::size_t>(s)];
        for (std::size_t e = 0; e < mine.size(); e += 97) {
          double want = 0;
          for (int q : members) want += 0.1 * (q + 1) + 1e-3 * static_cast<double>(e);
          CHECK(mine[e] == doctest::Approx(want).epsilon(1e-5));
        }
        for (int q : members) CHECK(reduced[static_cast<std::size_t>(q) * 3 + static_cast<std::size_t>(s)] == mine);
        const auto& g = gathered[static_cast<std::size_t>(r) * 3 + static_cast<std::size_t>(s)];
        std::size_t at = 0;
        bool ok = true;
        for (int j = 0; j < static_cast<int>(members.size()); ++j)
          for (int e = 0; e < j + 2; ++e) ok = ok && g[at++] == static_cast<float>(100 * j + e);
        CHECK(ok);
      }
    }
  }
}
