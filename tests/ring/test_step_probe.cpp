// The public step probe (ringattn/step_probe.hpp) on real rings of threads: after P-1
// passes every rank has held every rank's block exactly once, in ring order, byte for
// byte; a rank whose probe has another spec fails the ring naming both.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn/step_probe.hpp"
#include "tests/free_port.hpp"
#include "tests/ring/ranks_as_threads.hpp"

using namespace ringattn;
using test::on_ranks;
using test::options;

namespace {

std::string master() { return "127.0.0.1:" + std::to_string(test::free_port()); }

AttentionConfig config(std::int64_t heads, std::int64_t head_dim) {
  AttentionConfig c;
  c.heads = c.kv_heads = heads;
  c.head_dim = head_dim;
  c.dtype = DType::f32;
  c.threads = 1;
  return c;
}

// Rank r's K row i: every value r * 1000 + i (V: its negative).
std::vector<float> block_of(int rank, std::int64_t rows, std::int64_t width, float sign) {
  std::vector<float> b(static_cast<std::size_t>(rows * width));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t x = 0; x < width; ++x) b[static_cast<std::size_t>(i * width + x)] = sign * static_cast<float>(rank * 1000 + i);
  return b;
}

}  // namespace

TEST_CASE("step probe: every rank's block visits every rank once, in ring order, unchanged, for P = 2 and 3") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    const std::string m = master();
    const std::int64_t heads = 2, dim = 32, tokens = 12 * world;
    const auto errors = on_ranks(world, [&](int rank) {
      Ring ring = Ring::connect(options(rank, world, m));
      BlockAttention attn(config(heads, dim));
      const Positions own = shard_positions(Layout::zigzag, tokens, world, rank);
      const auto k = block_of(rank, own.size(), heads * dim, 1.0f), v = block_of(rank, own.size(), heads * dim, -1.0f);
      RingStepProbe probe(ring, attn, 7, own, k.data(), v.data());
      CHECK(probe.block_bytes() > k.size() * sizeof(float) * 2);
      for (int step = 0; step < world; ++step) {
        const auto b = probe.current();
        const int origin = (rank - step + world) % world;
        CHECK(b.origin == origin);
        const Positions expect = shard_positions(Layout::zigzag, tokens, world, origin);
        REQUIRE(b.positions != nullptr);
        CHECK(b.positions->size() == expect.size());
        CHECK(b.positions->materialize() == expect.materialize());
        const auto ek = block_of(origin, expect.size(), heads * dim, 1.0f), ev = block_of(origin, expect.size(), heads * dim, -1.0f);
        CHECK(std::memcmp(b.k, ek.data(), ek.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(b.v, ev.data(), ev.size() * sizeof(float)) == 0);
        if (step + 1 < world) {
          probe.post();
          probe.finish();
        }
      }
      ring.close();
    });
    for (const auto& e : errors) CHECK(e == "");
  }
}

TEST_CASE("step probe: a rank whose probe has another head count fails the ring on both ranks, naming the spec") {
  const std::string m = master();
  const auto errors = on_ranks(2, [&](int rank) {
    Ring ring = Ring::connect(options(rank, 2, m, 10));
    const std::int64_t heads = rank == 0 ? 2 : 4;
    BlockAttention attn(config(heads, 32));
    const Positions own = shard_positions(Layout::contiguous, 16, 2, rank);
    const auto k = block_of(rank, own.size(), heads * 32, 1.0f);
    RingStepProbe probe(ring, attn, 1, own, k.data(), k.data());
    probe.post();
    probe.finish();
  });
  for (const auto& e : errors) {
    CAPTURE(e);
    CHECK(e.find("rank") != std::string::npos);
    CHECK(e.find("head") != std::string::npos);
  }
}

// Issue 45: a probe is checked against the ring's limits as forward() is, before its block
// is sized: its spec goes on the wire in 32 bits and kv_heads * head_dim sizes the block.
TEST_CASE("step probe: a block beyond the ring's limits is refused before anything is sized or sent") {
  RingOptions o = options(0, 1, "");
  o.limits.max_heads = o.limits.max_kv_heads = 4;
  o.limits.max_rows = 16;
  Ring ring = Ring::connect(o);
  BlockAttention wide(config(8, 32));  // 8 heads over the ring's 4
  const Positions own = Positions::contiguous(0, 4);
  const auto k = block_of(0, 4, 8 * 32, 1.0f);
  CHECK_THROWS_WITH_AS(RingStepProbe(ring, wide, 1, own, k.data(), k.data()),
                       doctest::Contains("rank 0: RingStepProbe: heads 8/8, head_dim 32 exceed the ring's limits (4/4"),
                       InvalidArgument);
  BlockAttention fits(config(4, 32));
  const Positions many = Positions::contiguous(0, 17);  // one row over max_rows
  const auto k17 = block_of(0, 17, 4 * 32, 1.0f);
  CHECK_THROWS_WITH_AS(RingStepProbe(ring, fits, 2, many, k17.data(), k17.data()),
                       doctest::Contains("17 rows exceed the ring's max_rows = 16"), InvalidArgument);
  const auto k4 = block_of(0, 4, 4 * 32, 1.0f);
  RingStepProbe ok(ring, fits, 3, own, k4.data(), k4.data());  // within the limits: made
  CHECK(ok.current().origin == 0);
}
