// Decode attention over a KV cache (kernels/cache_attention.hpp) against the float64
// oracle: every ISA path, both cache dtypes, GQA ratios, masks, cache lengths across the
// tile (256) and chunk (4096) edges, several sequences (segments) in one call.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/cache_attention.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "src/oracle/random_inputs.hpp"
#include "src/oracle/reference.hpp"

using namespace ringattn;

namespace {

struct Seq {
  std::int64_t nk;
  std::vector<std::int64_t> kpos;
  std::vector<float> k, v;
  std::vector<std::uint16_t> k16, v16;
};

// Max |O - O_ref| and |lse - lse_ref| of one call over `lengths` sequences, one query
// each (at `qpos_offset` after the sequence's last key) plus a second query of the first
// sequence placed in its middle (so the mask hides part of its cache).
std::pair<double, double> run(Isa isa, DType dt, std::int64_t H, std::int64_t KH, std::int64_t D, Mask mask,
                              const std::vector<std::int64_t>& lengths, unsigned seed) {
  AttentionConfig cfg;
  cfg.heads = H;
  cfg.kv_heads = KH;
  cfg.head_dim = D;
  cfg.dtype = dt;
  cfg.mask = mask;
  cfg.threads = 2;
  cfg.isa = isa;
  kernels::CacheAttention att(cfg);
  std::vector<Seq> seqs;
  std::vector<std::int64_t> qpos;
  std::vector<kernels::CacheSegment> segs;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    Seq x;
    x.nk = lengths[s];
    for (std::int64_t j = 0; j < x.nk; ++j) x.kpos.push_back(3 * j + 1);  // gaps: positions, not rows
    x.k = oracle::random_normal(static_cast<std::size_t>(x.nk * KH * D), seed + 10 * static_cast<unsigned>(s));
    x.v = oracle::random_normal(static_cast<std::size_t>(x.nk * KH * D), seed + 10 * static_cast<unsigned>(s) + 1);
    x.k16 = oracle::round_to_bf16(x.k);
    x.v16 = oracle::round_to_bf16(x.v);
    if (dt == DType::f32) x.k16.clear(), x.v16.clear();
    seqs.push_back(std::move(x));
  }
  for (std::size_t s = 0; s < seqs.size(); ++s) qpos.push_back(seqs[s].nk ? seqs[s].kpos.back() + 1 : 0);
  qpos.push_back(seqs[0].nk ? seqs[0].kpos[static_cast<std::size_t>(seqs[0].nk / 2)] : 0);  // second query of seq 0
  const auto nq = static_cast<std::int64_t>(qpos.size());
  auto q = oracle::random_normal(static_cast<std::size_t>(nq * H * D), seed + 999);
  if (dt == DType::bf16) oracle::round_to_bf16(q);  // the ring sends bf16 q for a bf16 call
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const auto& x = seqs[s];
    const void* k = dt == DType::bf16 ? static_cast<const void*>(x.k16.data()) : x.k.data();
    const void* v = dt == DType::bf16 ? static_cast<const void*>(x.v16.data()) : x.v.data();
    segs.push_back({k, v, x.kpos.data(), x.nk, static_cast<std::int64_t>(s), static_cast<std::int64_t>(s) + 1});
  }
  // The extra query of sequence 0: its own segment over the same rows.
  segs.push_back({segs[0].k, segs[0].v, seqs[0].kpos.data(), seqs[0].nk, nq - 1, nq});
  OnlineSoftmaxState st(nq, H, D);
  att.fold(q.data(), qpos.data(), segs, st);
  std::vector<float> o(static_cast<std::size_t>(nq * H * D)), lse(static_cast<std::size_t>(nq * H));
  finalize(st, o.data(), lse.data());

  double eo = 0, el = 0;
  for (std::int64_t i = 0; i < nq; ++i) {
    const auto& x = seqs[i == nq - 1 ? 0 : static_cast<std::size_t>(i)];
    std::vector<double> ro(static_cast<std::size_t>(H * D)), rl(static_cast<std::size_t>(H));
    const Positions qp = Positions::contiguous(qpos[static_cast<std::size_t>(i)], 1);
    const Positions kp = x.nk ? Positions::from_sorted(x.kpos.data(), x.nk) : Positions();
    oracle::dense_attention_f64({H, KH, D, mask, 0.0}, q.data() + i * H * D, qp, x.k.data(), x.v.data(), kp, ro.data(),
                                rl.data());
    for (std::int64_t h = 0; h < H; ++h) {
      const double a = lse[static_cast<std::size_t>(i * H + h)], b = rl[static_cast<std::size_t>(h)];
      if (!(std::isinf(a) && std::isinf(b))) el = std::max(el, std::isnan(a) ? INFINITY : std::fabs(a - b));
      for (std::int64_t e = 0; e < D; ++e) {
        const double d = std::fabs(o[static_cast<std::size_t>((i * H + h) * D + e)] - ro[static_cast<std::size_t>(h * D + e)]);
        eo = std::max(eo, std::isnan(d) ? INFINITY : d);
      }
    }
  }
  return {eo, el};
}

}  // namespace

TEST_CASE("cache attention matches float64 on every ISA path, dtype, GQA ratio, mask and cache length") {
  for (Isa isa : available_isas())
    for (DType dt : {DType::f32, DType::bf16})
      for (auto [H, KH] : {std::pair<std::int64_t, std::int64_t>{4, 4}, {8, 2}, {8, 1}})
        for (Mask mask : {Mask::none(), Mask::causal(), Mask::sliding_window(100)}) {
          const std::vector<std::int64_t> lengths = {1, 255, 257, 4100, 0, 33};
          const auto [eo, el] = run(isa, dt, H, KH, 64, mask, lengths, 5);
          INFO(to_string(isa) << " " << to_string(dt) << " H " << H << "/" << KH << " " << to_string(mask));
          CHECK(eo <= 2e-5);  // fp32 state and sums; bf16 only rounds the inputs, which the oracle sees too
          CHECK(el <= 2e-5);
        }
}

TEST_CASE("cache attention: head dims 32..256 and a long cache split over many items") {
  for (std::int64_t D : {32, 48, 128, 256}) {
    const auto [eo, el] = run(default_isa(), DType::bf16, 8, 2, D, Mask::causal(), {9000}, 3);
    INFO("D " << D);
    CHECK(eo <= 2e-5);
    CHECK(el <= 2e-5);
  }
}

TEST_CASE("cache attention: nothing visible gives O = 0 and lse = -inf; counts what it read") {
  AttentionConfig cfg;
  cfg.heads = 2;
  cfg.kv_heads = 1;
  cfg.head_dim = 32;
  cfg.mask = Mask::causal();
  kernels::CacheAttention att(cfg);
  std::vector<std::int64_t> kpos = {10, 11, 12};
  std::vector<float> k(3 * 32, 0.5f), v(3 * 32, 1.0f), q(2 * 2 * 32, 0.1f);
  std::vector<std::int64_t> qpos = {5, 11};  // sees nothing; sees two keys
  kernels::CacheSegment segs[] = {{k.data(), v.data(), kpos.data(), 3, 0, 2}};
  OnlineSoftmaxState st(2, 2, 32);
  const auto fs = att.fold(q.data(), qpos.data(), segs, st);
  std::vector<float> o(2 * 2 * 32), lse(4);
  finalize(st, o.data(), lse.data());
  CHECK(std::isinf(lse[0]));
  CHECK(o[0] == 0.0f);
  CHECK(o[2 * 32] == doctest::Approx(1.0));
  CHECK(fs.keys_read == 2);
  CHECK(fs.useful_flops == doctest::Approx(4.0 * 2 * 32 * 2));
}
