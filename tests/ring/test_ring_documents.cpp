// Packed variable-length batches through the public Ring: every rank passes its rows'
// positions and document ids from the sharding helper (packing.hpp); the result must be
// float64 dense attention within each document. Tolerances as test_ring_api.cpp.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>

#include "ringattn/error.hpp"
#include "ringattn/packing.hpp"
#include "ringattn/ring.hpp"
#include "src/oracle/random_inputs.hpp"
#include "ring/block_layout.hpp"
#include "ring/internals.hpp"
#include "src/oracle/reference.hpp"
#include "tests/free_port.hpp"
#include "tests/ring/ranks_as_threads.hpp"

using namespace ringattn;
using test::on_ranks;
using test::options;

namespace {

std::vector<std::int64_t> cumulative(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> cu = {0};
  for (auto n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

std::string fresh_master() { return "127.0.0.1:" + std::to_string(test::free_port()); }

// A packed batch over the whole sequence and its per-document float64 reference.
struct PackedBatch {
  std::vector<std::int64_t> cu;
  std::int64_t tokens, heads = 4, kv_heads = 2, head_dim = 64;
  AttentionSpec spec;
  std::vector<float> q, k, v;
  std::vector<double> ref_o, ref_lse;

  PackedBatch(std::vector<std::int64_t> cu_, Mask mask, DType dtype, unsigned seed) : cu(std::move(cu_)) {
    tokens = cu.back();
    spec = {heads, kv_heads, head_dim, dtype, mask, 0};
    q = oracle::random_normal(static_cast<std::size_t>(tokens * heads * head_dim), seed);
    k = oracle::random_normal(static_cast<std::size_t>(tokens * kv_heads * head_dim), seed + 1);
    v = oracle::random_normal(static_cast<std::size_t>(tokens * kv_heads * head_dim), seed + 2);
    if (dtype == DType::bf16) {
      oracle::round_to_bf16(q);
      oracle::round_to_bf16(k);
      oracle::round_to_bf16(v);
    }
    ref_o.resize(q.size());
    ref_lse.resize(static_cast<std::size_t>(tokens * heads));
    const auto ids = document_ids(cu);
    const auto all = Positions::contiguous(0, tokens);
    oracle::dense_attention_f64({heads, kv_heads, head_dim, mask, 0.0}, q.data(), all, k.data(), v.data(), all,
                                ref_o.data(), ref_lse.data(), ids.data(), ids.data());
  }

  static std::vector<float> rows(const std::vector<float>& t, const std::vector<std::int64_t>& pos, std::int64_t width) {
    std::vector<float> out;
    for (auto p : pos) out.insert(out.end(), t.begin() + p * width, t.begin() + (p + 1) * width);
    return out;
  }

  struct Result {
    double err_o = 0, err_lse = 0;
    ForwardStats stats;
  };

  Result run(Ring& ring, const PackedShard& shard) const {
    const auto& pos = shard.positions;
    const auto qr = rows(q, pos, heads * head_dim), kr = rows(k, pos, kv_heads * head_dim),
               vr = rows(v, pos, kv_heads * head_dim);
    std::vector<float> o(qr.size()), lse(pos.size() * static_cast<std::size_t>(heads));
    Result r;
    r.stats = ring.forward({spec, qr, kr, vr, pos, shard.documents}, o, lse);
    const auto H = static_cast<std::size_t>(heads), D = static_cast<std::size_t>(head_dim);
    for (std::size_t i = 0; i < pos.size(); ++i)
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t g = static_cast<std::size_t>(pos[i]) * H + h, l = i * H + h;
        if (!(std::isinf(ref_lse[g]) && std::isinf(lse[l]))) r.err_lse = std::max(r.err_lse, std::fabs(lse[l] - ref_lse[g]));
        for (std::size_t d = 0; d < D; ++d) r.err_o = std::max(r.err_o, std::fabs(o[l * D + d] - ref_o[g * D + d]));
      }
    return r;
  }
};

}  // namespace

TEST_CASE("ring documents: exact per-document attention for P = 1..4, every mask and dtype, balanced shards") {
  // Long documents spanning shards, tiny ones (1, 2 tokens: shorter than 2P), an empty one.
  const auto cu = cumulative({100, 1, 2, 37, 250, 0, 3, 130, 1});
  for (int world : {1, 2, 3, 4})
    for (Mask mask : {Mask::none(), Mask::causal(), Mask::sliding_window(37)})
      for (DType dtype : {DType::f32, DType::bf16}) {
        const PackedBatch b(cu, mask, dtype, 7);
        const auto shards = shard_documents(cu, world);
        INFO("P=" << world << " " << to_string(mask) << " " << to_string(dtype));
        std::vector<PackedBatch::Result> res(static_cast<std::size_t>(world));
        const std::string m = fresh_master();
        const auto errors = on_ranks(world, [&](int r) {
          Ring ring = Ring::connect(options(r, world, m));
          res[static_cast<std::size_t>(r)] = b.run(ring, shards[static_cast<std::size_t>(r)]);
        });
        for (int r = 0; r < world; ++r) {
          CHECK(errors[static_cast<std::size_t>(r)] == "");
          CHECK(res[static_cast<std::size_t>(r)].err_o <= (dtype == DType::bf16 ? 1e-2 : 2e-5));
          CHECK(res[static_cast<std::size_t>(r)].err_lse <= 2e-5);
        }
      }
}

TEST_CASE("ring documents: a step whose block shares no document is relayed, not folded") {
  // Three documents of 200 tokens cut contiguously over 3 ranks: each rank holds exactly
  // one document, so both visiting blocks hold none of its documents.
  const int world = 3;
  const auto cu = cumulative({200, 200, 200});
  const PackedBatch b(cu, Mask::none(), DType::f32, 9);
  const auto shards = shard_documents_contiguous(cu, world);
  std::vector<PackedBatch::Result> res(world);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, m));
    res[static_cast<std::size_t>(r)] = b.run(ring, shards[static_cast<std::size_t>(r)]);
  });
  for (int r = 0; r < world; ++r) {
    const auto& x = res[static_cast<std::size_t>(r)];
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(x.err_o <= 2e-5);
    CHECK(x.stats.steps == world);
    CHECK(x.stats.steps_skipped == world - 1);
    CHECK(x.stats.useful_flops == doctest::Approx(4.0 * 64 * 4 * 200.0 * 200.0));
  }
}

TEST_CASE("ring documents: as many tokens as ranks, in tiny documents") {
  const int world = 4;
  const auto cu = cumulative({1, 3});
  const PackedBatch b(cu, Mask::causal(), DType::f32, 11);
  const auto shards = shard_documents(cu, world);
  std::vector<PackedBatch::Result> res(world);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, m));
    res[static_cast<std::size_t>(r)] = b.run(ring, shards[static_cast<std::size_t>(r)]);
  });
  for (int r = 0; r < world; ++r) {
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(res[static_cast<std::size_t>(r)].err_o <= 2e-5);
  }
}

TEST_CASE("ring documents: a rank that calls without documents fails the call on every rank, naming both") {
  const int world = 3;
  const auto cu = cumulative({50, 70});
  const PackedBatch b(cu, Mask::causal(), DType::f32, 13);
  const auto shards = shard_documents(cu, world);
  std::vector<int> broken(world);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    broken[static_cast<std::size_t>(r)] = 1;  // as in test_ring_api: still connecting counts as broken
    Ring ring = Ring::connect(options(r, world, m, 5));
    broken[static_cast<std::size_t>(r)] = 0;
    const auto& s = shards[static_cast<std::size_t>(r)];
    const auto qr = PackedBatch::rows(b.q, s.positions, 4 * 64), kr = PackedBatch::rows(b.k, s.positions, 2 * 64),
               vr = PackedBatch::rows(b.v, s.positions, 2 * 64);
    std::vector<float> o(qr.size());
    try {
      if (r == 1) ring.forward({b.spec, qr, kr, vr, s.positions}, o);
      else ring.forward({b.spec, qr, kr, vr, s.positions, s.documents}, o);
    } catch (...) {
      broken[static_cast<std::size_t>(r)] = ring.broken();
      throw;
    }
  });
  for (int r = 0; r < world; ++r) {
    const std::string& e = errors[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << e);
    CHECK(e.find("no documents") != std::string::npos);
    CHECK(e.find("rank 1") != std::string::npos);
    CHECK(broken[static_cast<std::size_t>(r)]);
  }
}

TEST_CASE("ring documents: decreasing or missing ids are refused before sending; the ring stays usable") {
  const int world = 2;
  const auto cu = cumulative({30, 40});
  const PackedBatch b(cu, Mask::causal(), DType::f32, 15);
  const auto shards = shard_documents(cu, world);
  std::vector<std::string> first(world), second(world);
  std::vector<PackedBatch::Result> res(world);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, m));
    const auto& s = shards[static_cast<std::size_t>(r)];
    const auto qr = PackedBatch::rows(b.q, s.positions, 4 * 64), kv = PackedBatch::rows(b.k, s.positions, 2 * 64);
    std::vector<float> o(qr.size());
    auto reversed = s.documents;
    std::reverse(reversed.begin(), reversed.end());
    try {
      ring.forward({b.spec, qr, kv, kv, s.positions, reversed}, o);
    } catch (const InvalidArgument& e) {
      first[static_cast<std::size_t>(r)] = e.what();
    }
    try {
      ring.forward({b.spec, qr, kv, kv, s.positions, std::span(s.documents).first(1)}, o);
    } catch (const InvalidArgument& e) {
      second[static_cast<std::size_t>(r)] = e.what();
    }
    CHECK_FALSE(ring.broken());
    res[static_cast<std::size_t>(r)] = b.run(ring, s);
  });
  for (int r = 0; r < world; ++r) {
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(first[static_cast<std::size_t>(r)].find("document ids decrease") != std::string::npos);
    CHECK(second[static_cast<std::size_t>(r)].find("documents has 1 elements") != std::string::npos);
    CHECK(res[static_cast<std::size_t>(r)].err_o <= 2e-5);
  }
}

TEST_CASE("ring documents: a block whose ids arrive out of order is refused by the receiver, naming the sender") {
  const int world = 2;
  const auto cu = cumulative({40, 50});
  const PackedBatch b(cu, Mask::causal(), DType::f32, 17);
  const auto shards = shard_documents(cu, world);
  const std::string m = fresh_master();
  const auto errors = on_ranks(world, [&](int r) {
    Ring ring = Ring::connect(options(r, world, m, 5));
    const auto rows = shards[static_cast<std::size_t>(r)].positions.size();
    if (r == 0)  // rank 0's own block, as it leaves: its first row's document id made the largest
      RingInternals::set_step_hook(ring, [rows](int step, std::span<std::byte> block, std::atomic<std::uint64_t>&) {
        if (step != 0) return;
        std::byte* groups = block.data() + ringattn::ring::kBlockPrefixBytes + rows * 8;
        groups[0] = std::byte{0xff};
        groups[1] = std::byte{0x7f};
      });
    b.run(ring, shards[static_cast<std::size_t>(r)]);
  });
  INFO(errors[0] << " | " << errors[1]);
  CHECK(errors[1].find("rank 0's document ids decreasing at row 1") != std::string::npos);
  // Rank 0 may have finished this call before the abort reached it; its ring is broken
  // from then on, like any ring whose peer refused a frame.
}
