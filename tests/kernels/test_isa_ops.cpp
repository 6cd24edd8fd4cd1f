// ISA-level tests: every SIMD path of the softmax pieces against the generic one.
// Needs no oneDNN, so the same file runs natively and under qemu-aarch64.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/dispatch.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"

using namespace ringattn;
using kernels::SoftmaxOps;

namespace {

std::vector<float> randn(std::size_t n, unsigned seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The visible ranges [lo, hi) every row op is tested on: all, halves, a middle, none.
std::vector<std::pair<int, int>> visible_ranges(int n) {
  return {{0, n}, {0, n / 2}, {n / 3, n}, {n / 4, std::min(n, (3 * n) / 4 + 1)}, {0, 0}, {n, n}};
}

float bf16_to_f(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("dispatch lists generic last and refuses unknown names") {
  auto isas = available_isas();
  REQUIRE(!isas.empty());
  CHECK(isas.back() == Isa::generic);
  CHECK_THROWS_AS(parse_isa("sse9"), InvalidArgument);
  CHECK_THROWS_WITH_AS(parse_isa("sse9"), doctest::Contains("sse9"), InvalidArgument);
}

TEST_CASE("forcing an ISA the CPU or build lacks is an error naming it") {
  auto isas = available_isas();
  for (Isa i : {Isa::avx512, Isa::avx2, Isa::neon}) {
    if (std::find(isas.begin(), isas.end(), i) != isas.end()) continue;
    CHECK_THROWS_WITH_AS(kernels::ops_for(i), doctest::Contains(std::string(to_string(i)).c_str()), InvalidArgument);
  }
}

TEST_CASE("exp2 of every path matches libm to 2 ulp-ish (rel 3e-7) on [-126, 0]") {
  std::vector<float> x(1001), ref(1001), got(1001);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -126.0f * static_cast<float>(i) / 1000.0f;
  x[7] = -0.5f;
  x[8] = 0.49f;
  kernels::kOpsGeneric.exp2(x.data(), ref.data(), static_cast<int>(x.size()));
  for (Isa isa : available_isas()) {
    CAPTURE(to_string(isa));
    const SoftmaxOps& ops = kernels::ops_for(isa);
    for (int n : {1, 3, 8, 15, 16, 17, 1001}) {
      ops.exp2(x.data(), got.data(), n);
      for (int i = 0; i < n; ++i) {
        CAPTURE(x[static_cast<std::size_t>(i)]);
        CHECK(std::fabs(got[static_cast<std::size_t>(i)] - ref[static_cast<std::size_t>(i)]) <=
              3e-7f * ref[static_cast<std::size_t>(i)] + 1e-37f);
      }
    }
  }
}

TEST_CASE("online_row of every path matches generic for ragged rows and visible ranges") {
  const int ns[] = {1, 2, 7, 16, 17, 31, 64, 100, 256};
  for (Isa isa : available_isas()) {
    CAPTURE(to_string(isa));
    const SoftmaxOps& ops = kernels::ops_for(isa);
    unsigned seed = 1;
    for (int n : ns) {
      auto s = randn(static_cast<std::size_t>(n), seed++, 4.0f);
      for (const auto& [lo, hi] : visible_ranges(n)) {
        CAPTURE(n);
        CAPTURE(lo);
        CAPTURE(hi);
        for (bool bf16 : {false, true}) {
          for (float m0 : {-std::numeric_limits<float>::infinity(), 0.5f, 3.0f}) {
            float m_ref = m0, l_ref = m0 == -std::numeric_limits<float>::infinity() ? 0.0f : 2.0f;
            float m_got = m_ref, l_got = l_ref;
            std::vector<float> p_ref(static_cast<std::size_t>(n), -1.0f), p_got(static_cast<std::size_t>(n), -1.0f);
            std::vector<std::uint16_t> h_ref(static_cast<std::size_t>(n), 0xffff), h_got(static_cast<std::size_t>(n), 0xffff);
            const float a_ref = kernels::kOpsGeneric.online_row(s.data(), n, lo, hi, 0.125f, &m_ref, &l_ref,
                                                               bf16 ? nullptr : p_ref.data(), bf16 ? h_ref.data() : nullptr);
            const float a_got = ops.online_row(s.data(), n, lo, hi, 0.125f, &m_got, &l_got,
                                               bf16 ? nullptr : p_got.data(), bf16 ? h_got.data() : nullptr);
            CHECK(m_got == m_ref);
            CHECK(a_got == doctest::Approx(a_ref).epsilon(1e-6));
            CHECK(l_got == doctest::Approx(l_ref).epsilon(1e-5));
            CHECK(!std::isnan(l_got));
            for (int j = 0; j < n; ++j) {
              const auto J = static_cast<std::size_t>(j);
              const float pr = bf16 ? bf16_to_f(h_ref[J]) : p_ref[J];
              const float pg = bf16 ? bf16_to_f(h_got[J]) : p_got[J];
              if (j < lo || j >= hi) {
                CHECK(pg == 0.0f);  // exactly zero outside the visible range
              } else {
                // bf16: the paths may round a last-bit-different exp to a neighbour bf16.
                CHECK(std::fabs(pg - pr) <= (bf16 ? 8e-3f : 1e-6f) * pr + 1e-30f);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("grad_row of every path matches generic: P and dS over the visible range, exact zeros outside") {
  const int ns[] = {1, 2, 7, 8, 15, 16, 17, 31, 64, 100, 256};
  const float scale = 0.125f, kLog2e = 1.4426950408889634f;
  for (Isa isa : available_isas()) {
    CAPTURE(to_string(isa));
    const SoftmaxOps& ops = kernels::ops_for(isa);
    unsigned seed = 11;
    for (int n : ns) {
      const auto s0 = randn(static_cast<std::size_t>(n), seed++, 4.0f);
      const auto dp0 = randn(static_cast<std::size_t>(n), seed++, 2.0f);
      float mx = s0[0];
      for (float x : s0) mx = std::max(mx, x);
      const float lse = mx * scale + 1.5f;  // as a forward leaves it: above every scaled score
      for (const auto& [lo, hi] : visible_ranges(n)) {
        CAPTURE(n);
        CAPTURE(lo);
        CAPTURE(hi);
        for (bool bf16 : {false, true}) {
          CAPTURE(bf16);
          auto s_ref = s0, dp_ref = dp0, s_got = s0, dp_got = dp0;
          std::vector<std::uint16_t> p_ref(static_cast<std::size_t>(n), 0xffff), ds_ref(p_ref), p_got(p_ref), ds_got(p_ref);
          kernels::kOpsGeneric.grad_row(s_ref.data(), dp_ref.data(), n, lo, hi, scale * kLog2e, lse * kLog2e, scale, 0.3f,
                                        bf16 ? p_ref.data() : nullptr, bf16 ? ds_ref.data() : nullptr);
          ops.grad_row(s_got.data(), dp_got.data(), n, lo, hi, scale * kLog2e, lse * kLog2e, scale, 0.3f,
                       bf16 ? p_got.data() : nullptr, bf16 ? ds_got.data() : nullptr);
          for (int j = 0; j < n; ++j) {
            const auto J = static_cast<std::size_t>(j);
            const float pr = bf16 ? bf16_to_f(p_ref[J]) : s_ref[J], pg = bf16 ? bf16_to_f(p_got[J]) : s_got[J];
            const float dr = bf16 ? bf16_to_f(ds_ref[J]) : dp_ref[J], dg = bf16 ? bf16_to_f(ds_got[J]) : dp_got[J];
            if (j < lo || j >= hi) {
              CHECK(pg == 0.0f);  // exactly zero outside the visible range
              CHECK(dg == 0.0f);
              continue;
            }
            // The definition, in double: p = exp(scale·s − lse), ds = scale·p·(dp − delta).
            const double p64 = std::exp(static_cast<double>(s0[J]) * scale - lse);
            const double ds64 = scale * p64 * (static_cast<double>(dp0[J]) - static_cast<double>(0.3f));
            CHECK(std::fabs(pr - p64) <= (bf16 ? 4e-3 : 1e-6) * p64 + 1e-30);
            CHECK(std::fabs(dr - ds64) <= (bf16 ? 4e-3 : 2e-6) * std::fabs(ds64) + 1e-12);
            // bf16: the paths may round a last-bit-different value to a neighbour bf16.
            CHECK(std::fabs(pg - pr) <= (bf16 ? 8e-3f : 1e-6f) * pr + 1e-30f);
            CHECK(std::fabs(dg - dr) <= (bf16 ? 8e-3f : 2e-6f) * std::fabs(dr) + 1e-12f);
          }
          if (bf16) {  // s and dp are inputs only then
            CHECK(s_got == s0);
            CHECK(dp_got == dp0);
          }
        }
      }
    }
  }
}

TEST_CASE("rescale_add and bf16 conversions of every path match generic") {
  auto o0 = randn(133, 7), t = randn(133, 8);
  for (Isa isa : available_isas()) {
    CAPTURE(to_string(isa));
    const SoftmaxOps& ops = kernels::ops_for(isa);
    for (int n : {1, 5, 8, 16, 17, 128, 133}) {
      auto ref = o0, got = o0;
      kernels::kOpsGeneric.rescale_add(ref.data(), t.data(), 0.37f, n);
      ops.rescale_add(got.data(), t.data(), 0.37f, n);
      for (std::size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1e-6));
    }
    auto x = randn(133, 9, 1000.0f);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[4] = std::numeric_limits<float>::infinity();
    x[5] = 1.00390625f;  // exactly halfway between two bf16 values: rounds to even
    for (std::int64_t n : {1, 7, 16, 17, 133}) {
      std::vector<std::uint16_t> a(133, 0), b(133, 0);
      kernels::kOpsGeneric.to_bf16(x.data(), a.data(), n);
      ops.to_bf16(x.data(), b.data(), n);
      for (std::int64_t i = 0; i < n; ++i) {
        CAPTURE(i);
        if (std::isnan(x[static_cast<std::size_t>(i)])) CHECK(std::isnan(bf16_to_f(b[static_cast<std::size_t>(i)])));
        else CHECK(a[static_cast<std::size_t>(i)] == b[static_cast<std::size_t>(i)]);
      }
      std::vector<float> fa(133, 0), fb(133, 0);
      kernels::kOpsGeneric.from_bf16(a.data(), fa.data(), n);
      ops.from_bf16(a.data(), fb.data(), n);
      for (std::int64_t i = 0; i < n; ++i)
        if (!std::isnan(fa[static_cast<std::size_t>(i)])) CHECK(fa[static_cast<std::size_t>(i)] == fb[static_cast<std::size_t>(i)]);
    }
    std::uint16_t h = 0;
    ops.to_bf16(&x[5], &h, 1);
    CHECK(h == 0x3f80);  // 1.00390625 -> 1.0 (even)
  }
}

TEST_CASE("has_non_finite of every path flags exactly NaN and inf, in the body and the tail") {
  // Bad and extreme-but-finite bit patterns, fp32 and bf16.
  const std::uint32_t bad32[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fbfffffu};
  const std::uint32_t fine32[] = {0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000000u, 0x00800000u, 0x3f800000u};
  const std::uint16_t bad16[] = {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff};
  const std::uint16_t fine16[] = {0x7f7f, 0xff7f, 0x0001, 0x8000, 0x0080, 0x3f80};
  const int ns[] = {0, 1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 257};
  for (Isa isa : available_isas()) {
    CAPTURE(to_string(isa));
    const SoftmaxOps& ops = kernels::ops_for(isa);
    for (int n : ns) {
      CAPTURE(n);
      const auto base = randn(static_cast<std::size_t>(n), 40 + static_cast<unsigned>(n), 100.0f);
      std::vector<float> x32(base.size());
      std::vector<std::uint16_t> x16(base.size());
      // Random values with every finite extreme in between.
      for (std::size_t i = 0; i < base.size(); ++i) {
        const std::uint32_t u = std::bit_cast<std::uint32_t>(base[i]);
        x32[i] = std::bit_cast<float>(i % 3 == 0 ? fine32[i % 6] : u);
        x16[i] = i % 3 == 0 ? fine16[i % 6] : static_cast<std::uint16_t>(u >> 16);
      }
      CHECK_FALSE(ops.has_non_finite_f32(x32.data(), n));
      CHECK_FALSE(ops.has_non_finite_bf16(x16.data(), n));
      if (n == 0) continue;
      // Each bad pattern at the first, a middle and the last position.
      for (std::size_t at : {std::size_t{0}, static_cast<std::size_t>(n / 2), static_cast<std::size_t>(n - 1)}) {
        CAPTURE(at);
        for (std::uint32_t b : bad32) {
          auto y = x32;
          y[at] = std::bit_cast<float>(b);
          CHECK(ops.has_non_finite_f32(y.data(), n));
          CHECK_FALSE(ops.has_non_finite_f32(y.data(), static_cast<std::int64_t>(at)));  // stops before it
        }
        for (std::uint16_t b : bad16) {
          auto y = x16;
          y[at] = b;
          CHECK(ops.has_non_finite_bf16(y.data(), n));
          CHECK_FALSE(ops.has_non_finite_bf16(y.data(), static_cast<std::int64_t>(at)));
        }
      }
    }
  }
}

TEST_CASE("decode's cache loops of every path match a float64 sum: scores and weighted sums, fp32 and bf16 rows") {
  // Rows at a stride (as in a cache of several KV heads), head dims with a 16-element tail
  // (48) and without, 1..5 query heads per KV head, key counts across the 16- and 4-key blocks.
  for (int d : {32, 48, 128}) {
    const std::int64_t ld = 3 * d;
    for (int G : {1, 4, 5})
      for (int n : {1, 7, 33}) {
        auto q = randn(static_cast<std::size_t>(G * d), 3);
        // Half the cases with a q that bf16 holds exactly: the AVX-512 path then takes
        // vdpbf16ps where the CPU has it, else the same split loops.
        if (n % 2 == 1)
          for (auto& x : q) {
            std::uint32_t u;
            std::memcpy(&u, &x, 4);
            x = bf16_to_f(static_cast<std::uint16_t>(u >> 16));
          }
        auto kf = randn(static_cast<std::size_t>(n * ld), 4);
        std::vector<std::uint16_t> kb(kf.size());
        for (std::size_t i = 0; i < kf.size(); ++i) {
          std::uint32_t u;
          std::memcpy(&u, &kf[i], 4);
          kb[i] = static_cast<std::uint16_t>(u >> 16);  // truncate: any bf16 will do
          kf[i] = bf16_to_f(kb[i]);                     // fp32 rows hold the same values
        }
        const auto p = randn(static_cast<std::size_t>(G * n), 5);
        for (Isa isa : available_isas()) {
          INFO(to_string(isa) << " d " << d << " G " << G << " n " << n);
          const SoftmaxOps& ops = kernels::ops_for(isa);
          std::vector<float> s32(static_cast<std::size_t>(G * n)), s16(s32.size()), o32(static_cast<std::size_t>(G * d)),
              o16(o32.size());
          ops.cache_scores_f32(q.data(), G, kf.data(), ld, n, d, s32.data());
          ops.cache_scores_bf16(q.data(), G, kb.data(), ld, n, d, s16.data());
          ops.cache_pv_f32(p.data(), G, kf.data(), ld, n, d, o32.data());
          ops.cache_pv_bf16(p.data(), G, kb.data(), ld, n, d, o16.data());
          double es = 0, eo = 0;
          for (int g = 0; g < G; ++g) {
            for (int j = 0; j < n; ++j) {
              double ref = 0;
              for (int e = 0; e < d; ++e) ref += double(q[static_cast<std::size_t>(g * d + e)]) * kf[static_cast<std::size_t>(j * ld + e)];
              es = std::max({es, std::fabs(s32[static_cast<std::size_t>(g * n + j)] - ref), std::fabs(s16[static_cast<std::size_t>(g * n + j)] - ref)});
            }
            for (int e = 0; e < d; ++e) {
              double ref = 0;
              for (int j = 0; j < n; ++j) ref += double(p[static_cast<std::size_t>(g * n + j)]) * kf[static_cast<std::size_t>(j * ld + e)];
              eo = std::max({eo, std::fabs(o32[static_cast<std::size_t>(g * d + e)] - ref), std::fabs(o16[static_cast<std::size_t>(g * d + e)] - ref)});
            }
          }
          CHECK(es <= 1e-4);
          CHECK(eo <= 1e-4);
        }
      }
  }
}
