// ringattn::Linear (include/ringattn/linear.hpp): y = x · Wᵀ against float64 on every ISA
// path, fp32, bf16 and fp16 weights, ragged shapes and strides, K longer than one run; a row's result bitwise the same
// whatever rows and threads share the call; add = the sum formed first, then added.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/half.hpp"
#include "ringattn/linear.hpp"

using namespace ringattn;

namespace {

std::vector<float> randn(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
// W [out, in] in `dtype`, and the values the sums should use.
struct Weights {
  std::vector<float> values;
  std::vector<std::uint16_t> bits;
  const void* data(DType d) const { return d != DType::f32 ? static_cast<const void*>(bits.data()) : values.data(); }
};
Weights weights(std::int64_t out, std::int64_t in, DType d, unsigned seed) {
  Weights w{randn(std::size_t(out * in), seed), {}};
  if (d == DType::bf16) {  // the library's rounding (nearest even), and the values it gives
    w.bits.resize(w.values.size());
    to_bf16(w.values.data(), w.bits.data(), static_cast<std::int64_t>(w.values.size()));
    from_bf16(w.bits.data(), w.values.data(), static_cast<std::int64_t>(w.values.size()));
  }
  if (d == DType::f16) {  // IEEE half, nearest even
    w.bits.resize(w.values.size());
    for (std::size_t i = 0; i < w.values.size(); ++i) {
      w.bits[i] = to_f16(w.values[i]);
      w.values[i] = from_f16(w.bits[i]);
    }
  }
  return w;
}

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * 4) == 0; }

}  // namespace

TEST_CASE("linear: every path, fp32, bf16 and fp16, ragged shapes and strides, against float64") {
  for (Isa isa : available_isas())
    for (DType d : {DType::f32, DType::bf16, DType::f16})
      for (auto [out, in] : {std::pair<std::int64_t, std::int64_t>{1, 1},
                             {31, 7},
                             {32, 64},
                             {33, 2},
                             {100, 129},
                             {257, 300},
                             {40, 1100}}) {
        CAPTURE(to_string(isa));
        CAPTURE(to_string(d));
        CAPTURE(out);
        CAPTURE(in);
        const Weights w = weights(out, in, d, unsigned(out * 1000 + in));
        const Linear lin(d, out, in, w.data(d), isa);
        CHECK(lin.out() == out);
        CHECK(lin.in() == in);
        CHECK(lin.isa() == isa);
        CHECK(std::string(lin.kernel()).rfind(std::string(to_string(isa)), 0) == 0);  // "avx512" or "avx512-bf16"
        for (std::int64_t rows : {1, 5, 13, 40}) {
          const std::int64_t ldx = in + 2, ldy = out + 3;
          const std::vector<float> x = randn(std::size_t(rows * ldx), unsigned(rows));
          const std::vector<float> y0 = randn(std::size_t(rows * ldy), 99);
          std::vector<float> y = y0;
          lin.apply(x.data(), rows, ldx, y.data(), ldy, false, 2);
          // bf16 weights multiply x rounded to bf16 (kernels/linear_ops.hpp): the sum uses those values.
          std::vector<float> xv = x;
          if (d == DType::bf16) {
            std::vector<std::uint16_t> b(x.size());
            to_bf16(x.data(), b.data(), static_cast<std::int64_t>(x.size()));
            from_bf16(b.data(), xv.data(), static_cast<std::int64_t>(x.size()));
          }
          int bad = 0;
          for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t o = 0; o < ldy; ++o) {
              const float got = y[std::size_t(r * ldy + o)];
              if (o >= out) {
                bad += got != y0[std::size_t(r * ldy + o)];  // padding columns untouched
                continue;
              }
              double sum = 0, mag = 0;
              for (std::int64_t k = 0; k < in; ++k) {
                const double p = double(xv[std::size_t(r * ldx + k)]) * w.values[std::size_t(o * in + k)];
                sum += p;
                mag += std::fabs(p);
              }
              bad += !(std::fabs(got - sum) <= 2.0 * double(in + 1) * 0x1p-24 * mag + 1e-30);
            }
          CHECK(bad == 0);
        }
      }
}

TEST_CASE("linear: a row's result is the same alone, in any batch, on any thread count") {
  for (Isa isa : available_isas())
    for (DType d : {DType::f32, DType::bf16, DType::f16})
      for (std::int64_t in : {96, 4103}) {  // 4103: K in runs of 2048 carried (kernels/linear.cpp)
        CAPTURE(to_string(isa));
        CAPTURE(to_string(d));
        CAPTURE(in);
        const std::int64_t out = 200, rows = 61;
        const Weights w = weights(out, in, d, 5);
        const Linear lin(d, out, in, w.data(d), isa);
        const std::vector<float> x = randn(std::size_t(rows * in), 6);
        std::vector<float> all(std::size_t(rows * out));
        lin.apply(x, all, false, 2);
        for (int threads : {1, 3}) {
          std::vector<float> again(all.size());
          lin.apply(x, again, false, threads);
          CHECK(same_bits(again.data(), all.data(), all.size()));
        }
        for (std::int64_t first : {std::int64_t{0}, std::int64_t{7}, std::int64_t{29}})
          for (std::int64_t n : {std::int64_t{1}, std::int64_t{2}, std::int64_t{13}}) {
            std::vector<float> part(std::size_t(n * out));
            lin.apply(std::span(x).subspan(std::size_t(first * in), std::size_t(n * in)), part, false, 1);
            CHECK(same_bits(part.data(), all.data() + first * out, part.size()));
          }
        // add: y + (the same sum)
        const std::vector<float> y0 = randn(all.size(), 8);
        std::vector<float> y = y0;
        lin.apply(x, y, true, 2);
        int bad = 0;
        for (std::size_t i = 0; i < y.size(); ++i) bad += y[i] != y0[i] + all[i];
        CHECK(bad == 0);
      }
}

TEST_CASE("linear: row(o) gives output o's weights back, widened (a tied embedding's lookup)") {
  for (DType d : {DType::f32, DType::bf16, DType::f16})
    for (auto [out, in] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {33, 7}, {70, 64}}) {
      CAPTURE(to_string(d));
      CAPTURE(out);
      CAPTURE(in);
      const Weights w = weights(out, in, d, 21);
      const Linear lin(d, out, in, w.data(d));
      std::vector<float> got(static_cast<std::size_t>(in));
      for (std::int64_t o = 0; o < out; ++o) {
        lin.row(o, got);
        CHECK(same_bits(got.data(), w.values.data() + o * in, got.size()));
      }
      const std::string past = "row " + std::to_string(out);
      CHECK_THROWS_WITH_AS(lin.row(out, got), doctest::Contains(past.c_str()), InvalidArgument);
      CHECK_THROWS_WITH_AS(lin.row(-1, got), doctest::Contains("row -1"), InvalidArgument);
      std::vector<float> wrong(static_cast<std::size_t>(in + 1));
      CHECK_THROWS_AS(lin.row(0, wrong), InvalidArgument);
    }
}

TEST_CASE("linear: the packed weights are the same bytes on every path") {
  const Weights w = weights(70, 33, DType::bf16, 3);
  const Linear first(DType::bf16, 70, 33, w.data(DType::bf16), available_isas().front());
  for (Isa isa : available_isas()) {
    const Linear other(DType::bf16, 70, 33, w.data(DType::bf16), isa);
    REQUIRE(other.packed().size() == first.packed().size());
    CHECK(std::memcmp(other.packed().data(), first.packed().data(), first.packed().size()) == 0);
  }
  // bf16 holds 2 bytes a weight (plus padding to 32 outputs and an even k), never 4.
  CHECK(first.packed().size() == std::size_t(96 * 17 * 4));
}

#if defined(__x86_64__)
TEST_CASE("half: to_f16 and from_f16 give the compiler's IEEE conversions, bit for bit") {
  // from_f16: every pattern (NaNs: both NaN, the same sign).
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float want = static_cast<float>(std::bit_cast<_Float16>(static_cast<std::uint16_t>(h)));
    const float got = from_f16(static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
      CHECK(std::signbit(got) == std::signbit(want));
    } else if (std::memcmp(&got, &want, 4) != 0) {
      FAIL("from_f16(" << h << ") = " << got << ", want " << want);
    }
  }
  // to_f16: every half's value, the midpoints and their neighbours, overflow, random floats.
  std::vector<float> probe;
  for (std::uint32_t h = 0; h < 0x7C00; ++h) {
    const float v = from_f16(static_cast<std::uint16_t>(h)), next = from_f16(static_cast<std::uint16_t>(h + 1));
    const float mid = v + (next - v) / 2;  // exact: one more bit than a half has
    for (float f : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      probe.push_back(f);
      probe.push_back(-f);
    }
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e30f, INFINITY, 1e-40f, 0x1p-25f, 0x1.000002p-25f})
    probe.push_back(f);
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) probe.push_back(f);
  }
  int bad = 0;
  for (float f : probe) bad += to_f16(f) != std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
  CHECK(bad == 0);
  CHECK(std::isnan(from_f16(to_f16(NAN))));
}
#endif

TEST_CASE("linear: fp16 weights give the bits of fp32 weights holding the same values, in 2 bytes a weight") {
  for (Isa isa : available_isas())
    for (auto [out, in, rows] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{33, 7, 1},
                                 {130, 64, 3},  // few rows: the wide calls
                                 {64, 2100, 5},  // K in two runs
                                 {97, 300, 40}}) {
      CAPTURE(to_string(isa));
      CAPTURE(out);
      CAPTURE(in);
      const Weights w = weights(out, in, DType::f16, unsigned(out + in));
      const Linear half(DType::f16, out, in, w.data(DType::f16), isa);
      const Linear full(DType::f32, out, in, w.values.data(), isa);
      CHECK(half.dtype() == DType::f16);
      CHECK(half.packed().size() == std::size_t((out + 31) / 32 * 32 * in * 2));
      const std::vector<float> x = randn(std::size_t(rows * in), 4);
      std::vector<float> a(std::size_t(rows * out)), b(a.size());
      half.apply(x, a, false, 2);
      full.apply(x, b, false, 2);
      CHECK(same_bits(a.data(), b.data(), a.size()));
      // From fp32 blocks: each weight rounded to the nearest half, the same packed bytes.
      const Linear blocks(DType::f16, in, {std::span<const float>(randn(std::size_t(out * in), unsigned(out + in)))}, isa);
      REQUIRE(blocks.packed().size() == half.packed().size());
      CHECK(std::memcmp(blocks.packed().data(), half.packed().data(), half.packed().size()) == 0);
    }
}

TEST_CASE("linear: blocks in any dtype, held in any dtype, pack as the values converted once") {
  // Q, K, V from a file in bf16, fp16 or fp32, held in each dtype: the packed bytes equal a
  // Linear made from the values widened to fp32 (the held dtype rounds them the same way).
  const std::int64_t in = 40;
  for (DType from : {DType::f32, DType::bf16, DType::f16})
    for (DType held : {DType::f32, DType::bf16, DType::f16}) {
      CAPTURE(to_string(from));
      CAPTURE(to_string(held));
      const Weights q = weights(33, in, from, 1), k = weights(8, in, from, 2), v = weights(8, in, from, 3);
      const Linear::Block blocks[] = {{from, q.data(from), 33}, {from, k.data(from), 8}, {from, v.data(from), 8}};
      const Linear stacked(held, in, std::span<const Linear::Block>(blocks));
      const Linear floats(held, in, {std::span<const float>(q.values), std::span<const float>(k.values),
                                     std::span<const float>(v.values)});
      CHECK(stacked.out() == 49);
      REQUIRE(stacked.packed().size() == floats.packed().size());
      CHECK(std::memcmp(stacked.packed().data(), floats.packed().data(), floats.packed().size()) == 0);
    }
  const Linear::Block none{DType::bf16, nullptr, 4};
  CHECK_THROWS_WITH_AS(Linear(DType::f32, in, std::span<const Linear::Block>(&none, 1)),
                       doctest::Contains("without data"), InvalidArgument);
  CHECK_THROWS_AS(Linear(DType::f32, in, std::span<const Linear::Block>()), InvalidArgument);
}

TEST_CASE("linear: q8_0 weights with fp32 activations give the bits of fp32 weights holding the dequantized values; GGUF blocks pack as quantized floats") {
  for (Isa isa : available_isas())
    for (auto [out, in, rows] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{33, 32, 1},
                                 {70, 96, 3}, {40, 4160, 2}, {65, 64, 13}, {97, 256, 40}}) {
      CAPTURE(to_string(isa));
      CAPTURE(out);
      CAPTURE(in);
      const std::vector<float> w = randn(std::size_t(out * in), unsigned(out + in));
      Linear q(DType::q8_0, in, {std::span<const float>(w)}, isa);
      q.set_activations(Activations::fp32);  // x as it is (test_int_blocks.cpp: the int8 default)
      CHECK(q.dtype() == DType::q8_0);
      CHECK(q.packed().size() == std::size_t((out + 31) / 32 * (in / 32) * 288 * 4));  // 9 bits a weight
      std::vector<float> values(w.size());
      for (std::int64_t o = 0; o < out; ++o) q.row(o, std::span(values).subspan(std::size_t(o * in), std::size_t(in)));
      // Each block: d = max|x| / 127 (held as fp16), q = round(x / d): within d / 2 of x,
      // plus q times d's fp16 rounding (2^-11 d).
      int bad = 0;
      for (std::size_t b0 = 0; b0 < w.size(); b0 += 32) {
        float amax = 0;
        for (std::size_t i = b0; i < b0 + 32; ++i) amax = std::max(amax, std::fabs(w[i]));
        for (std::size_t i = b0; i < b0 + 32; ++i) bad += !(std::fabs(values[i] - w[i]) <= amax / 127 * 0.57f);
      }
      CHECK(bad == 0);
      const Linear full(DType::f32, out, in, values.data(), isa);
      const std::vector<float> x = randn(std::size_t(rows * in), 9);
      std::vector<float> a(std::size_t(rows * out)), b(a.size());
      q.apply(x, a, false, 2);
      full.apply(x, b, false, 2);
      CHECK(same_bits(a.data(), b.data(), a.size()));
      // The same weights as GGUF Q8_0 blocks (fp16 d, int8 q[32] a block) pack to the same bytes.
      std::string gguf;
      for (std::int64_t o = 0; o < out; ++o)
        for (std::int64_t k0 = 0; k0 < in; k0 += 32) {
          float amax = 0;
          for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(w[std::size_t(o * in + k0 + i)]));
          const float d = amax / 127, id = d != 0 ? 1 / d : 0;
          const std::uint16_t h = to_f16(d);
          gguf.append(reinterpret_cast<const char*>(&h), 2);
          for (int i = 0; i < 32; ++i) gguf += static_cast<char>(static_cast<std::int8_t>(std::round(w[std::size_t(o * in + k0 + i)] * id)));
        }
      const Linear::Block block{DType::q8_0, gguf.data(), out};
      const Linear from_blocks(DType::q8_0, in, std::span<const Linear::Block>(&block, 1), isa);
      REQUIRE(from_blocks.packed().size() == q.packed().size());
      CHECK(std::memcmp(from_blocks.packed().data(), q.packed().data(), q.packed().size()) == 0);
      // Held widened: the dequantized values themselves.
      const Linear widened(DType::f32, in, std::span<const Linear::Block>(&block, 1), isa);
      REQUIRE(widened.packed().size() == full.packed().size());
      CHECK(std::memcmp(widened.packed().data(), full.packed().data(), full.packed().size()) == 0);
    }
  CHECK_THROWS_WITH_AS(Linear(DType::q8_0, 33, {std::span<const float>(std::vector<float>(66, 1.0f))}),
                       doctest::Contains("multiple of 32"), InvalidArgument);
}

TEST_CASE("linear: bf16 takes x as the dot instruction does: nearest even, denormals zero, NaN and inf kept") {
  // One output, in = 6: W = [1, 1, 0, 0, 0, 0] plus a denormal weight, which counts as zero.
  const std::uint16_t one = 0x3F80, denormal = 0x0001;
  const std::vector<std::uint16_t> w = {one, one, 0, 0, 0, denormal};
  for (Isa isa : available_isas()) {
    CAPTURE(to_string(isa));
    const Linear lin(DType::bf16, 1, 6, w.data(), isa);
    const float tiny = 1e-39f;  // an fp32 denormal: zero to the instruction
    auto y_of = [&](float a, float b, float c) {
      const std::vector<float> x = {a, b, c, 0, 0, 1e30f};  // 1e30 meets the denormal weight: 0
      std::vector<float> y(1);
      lin.apply(x, y);
      return y[0];
    };
    CHECK(y_of(1.0f + 0x1p-8f, 0, 0) == 1.0f);           // a tie: to the even neighbour
    CHECK(y_of(1.0f + 0x1.8p-8f, 0, 0) == 1.0f + 0x1p-7f);  // above half: up
    CHECK(y_of(tiny, 0, 0) == 0.0f);
    CHECK(std::isnan(y_of(NAN, 1, 0)));
    CHECK(y_of(INFINITY, 1, 0) == INFINITY);
    CHECK(y_of(3.0e38f, 3.0e38f, 0) == INFINITY);  // each rounds to a finite bf16; the sum overflows
    CHECK(y_of(2, 3, 1e30f) == 5.0f);              // the third weight is zero
  }
}

TEST_CASE("linear: bad shapes and calls are refused, naming them") {
  const std::vector<float> w(12, 1.0f);
  CHECK_THROWS_WITH_AS(Linear(DType::f32, 0, 4, w.data()), doctest::Contains("[0, 4]"), InvalidArgument);
  CHECK_THROWS_WITH_AS(Linear(DType::f32, 3, std::int64_t{1} << 25, w.data()), doctest::Contains("outside"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(Linear(DType::f32, 3, 4, nullptr), doctest::Contains("no data"), InvalidArgument);
  const Linear lin(DType::f32, 3, 4, w.data());
  std::vector<float> x(8), y(6);
  CHECK_THROWS_WITH_AS(lin.apply(x.data(), 2, 3, y.data(), 3), doctest::Contains("ldx 3"), InvalidArgument);
  CHECK_THROWS_WITH_AS(lin.apply(x.data(), 2, 4, y.data(), 2), doctest::Contains("ldy 2"), InvalidArgument);
  CHECK_THROWS_WITH_AS(lin.apply(std::span<const float>(x).first(7), y), doctest::Contains("x holds 7"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(lin.apply(x.data(), 2, 4, y.data(), 3, false, -1), doctest::Contains("threads -1"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(Linear().apply(x, y), doctest::Contains("empty"), InvalidArgument);
  lin.apply(x.data(), 0, 4, nullptr, 3);  // no rows: nothing to do
}

// Sizes a caller passes that would overflow are refused before anything is packed or read
// (issue 45): rows of blocks that wrap to a small total, x and y whose rows * out wraps,
// strides no address space holds.
TEST_CASE("linear: sizes that would overflow are refused before anything is packed or read") {
  const std::vector<float> w(4, 1.0f);
  // 2^62 * 3 + (2^62 - 2) + 3 wraps to 1 in 64 bits: the old sum passed the check and the
  // packing read 2^62 rows from a 4-float array.
  constexpr std::int64_t kHuge = std::int64_t{1} << 62;
  const std::vector<Linear::Block> wrap = {{DType::f32, w.data(), kHuge}, {DType::f32, w.data(), kHuge},
                                           {DType::f32, w.data(), kHuge}, {DType::f32, w.data(), kHuge - 2},
                                           {DType::f32, w.data(), 3}};
  CHECK_THROWS_WITH_AS(Linear(std::nullopt, 1, wrap), doctest::Contains("add up to more than 2^24"), InvalidArgument);
  const std::vector<Linear::Block> over = {{DType::f32, w.data(), std::int64_t{1} << 23},
                                           {DType::f32, w.data(), (std::int64_t{1} << 23) + 1}};
  CHECK_THROWS_WITH_AS(Linear(DType::f32, 1, over), doctest::Contains("add up to more than 2^24"), InvalidArgument);

  // out = 4, in = 1: x of 2^62 floats makes rows * out = 2^64, which wrapped to y's 0.
  const Linear lin(DType::f32, 4, 1, w.data());
  std::vector<float> y;
  const std::span<const float> huge_x(w.data(), std::size_t{1} << 62);  // never read: refused first
  CHECK_THROWS_WITH_AS(lin.apply(huge_x, y), doctest::Contains("x holds 4611686018427387904"), InvalidArgument);
  std::vector<float> x(4), y4(16);
  CHECK_THROWS_WITH_AS(lin.apply(x.data(), 4, kHuge, y4.data(), 4), doctest::Contains("address space"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(lin.apply(x.data(), 4, 1, y4.data(), kHuge), doctest::Contains("address space"),
                       InvalidArgument);
  lin.apply(x, y4);  // the shapes that fit still run
  CHECK(y4[0] == 0.0f);
}
