// ringattn::Linear's integer arithmetic for GGUF's block formats (kernels/int_ops.hpp, the
// default Activations::int8): against a float64 reference under the same rounding of the
// activations (each row's block of 32 or 256 values: dx = amax / 127, q = nearest even of
// v / dx), on every path; the same bits alone or in any batch, on any thread count,
// on every path; within quantization noise of the fp32-activation result; a non-finite
// activation reaches the row's outputs as NaN; Activations::fp32 keeps the dequantized bits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "quant_fixture.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/linear.hpp"

using namespace ringattn;
using namespace ringattn::test;

namespace {

// A Linear of `d` [out, in]: GGUF blocks (q4_k, q6_k) or fp32 weights quantized (q8_0).
Linear make(DType d, std::int64_t out, std::int64_t in, unsigned seed, Isa isa, std::vector<float>& values) {
  if (d == DType::q8_0) {
    const std::vector<float> w = randn(std::size_t(out * in), seed);
    Linear l(DType::q8_0, in, {std::span<const float>(w)}, isa);
    values.resize(w.size());
    for (std::int64_t o = 0; o < out; ++o) l.row(o, std::span(values).subspan(std::size_t(o * in), std::size_t(in)));
    return l;
  }
  const Matrix m = random_matrix(d, out, in, seed);
  values = m.values;
  const Linear::Block block{d, m.bytes.data(), out};
  return Linear(std::nullopt, in, std::span<const Linear::Block>(&block, 1), isa);
}

int grid(DType d) { return d == DType::q8_0 ? 32 : 256; }

// y in float64 from x quantized as int_ops.hpp says, and the scale of its terms
// (sum of |dx q w|) for the tolerance.
void reference(DType d, const std::vector<float>& x, std::int64_t rows, std::int64_t in, const std::vector<float>& w,
               std::int64_t out, std::vector<double>& y, std::vector<double>& scale) {
  y.assign(std::size_t(rows * out), 0);
  scale.assign(y.size(), 0);
  const int n = grid(d);
  std::vector<double> xq(static_cast<std::size_t>(in));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < in / n; ++b) {
      const float* v = x.data() + r * in + b * n;
      float amax = 0;
      for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float dx = amax / 127.0f;
      for (int i = 0; i < n; ++i) xq[std::size_t(b * n + i)] = amax == 0 ? 0.0 : double(dx) * std::nearbyint(v[i] / dx);
    }
    for (std::int64_t o = 0; o < out; ++o) {
      double s = 0, a = 0;
      for (std::int64_t k = 0; k < in; ++k) {
        const double t = xq[std::size_t(k)] * w[std::size_t(o * in + k)];
        s += t;
        a += std::fabs(t);
      }
      y[std::size_t(r * out + o)] = s;
      scale[std::size_t(r * out + o)] = a;
    }
  }
}

}  // namespace

TEST_CASE("linear int8: block formats against float64 under the same activation rounding, on every path") {
  for (DType d : {DType::q8_0, DType::q4_k, DType::q6_k})
    for (Isa isa : available_isas())
      for (auto [out, in, rows] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{33, 256, 1},
                                   {70, 512, 3}, {40, 2304, 17}, {64, 256, 16}, {96, 768, 5}, {40, 4352, 2}, {65, 512, 400}}) {
        CAPTURE(to_string(d));
        CAPTURE(to_string(isa));
        CAPTURE(out);
        CAPTURE(in);
        CAPTURE(rows);
        std::vector<float> w;
        const Linear l = make(d, out, in, unsigned(out * 7 + in), isa, w);
        CHECK(l.activations() == Activations::int8);
        const std::vector<float> x = randn(std::size_t(rows * in), unsigned(rows + 3));
        std::vector<float> y(std::size_t(rows * out));
        l.apply(x, y, false, 2);
        std::vector<double> want, scale;
        reference(d, x, rows, in, w, out, want, scale);
        // fp32 steps: a rounding of each block's T and of the running sum, in / grid of them;
        // 1e-6 of the terms' absolute sum is ~8 units in the last place of it.
        int bad = 0;
        double worst = 0;
        for (std::size_t i = 0; i < y.size(); ++i) {
          const double err = std::fabs(y[i] - want[i]) / scale[i];
          worst = std::max(worst, err);
          bad += !(err <= 1e-6);
        }
        CAPTURE(worst);
        CHECK(bad == 0);
        // add: the sum formed first, then added to y.
        std::vector<float> y2 = y;
        l.apply(x, y2, true, 1);
        for (std::size_t i = 0; i < y.size(); ++i) bad += y2[i] != y[i] + y[i];
        CHECK(bad == 0);
      }
}

TEST_CASE("linear int8: a row's result is the same alone, in any batch, on any thread count and on every path") {
  for (DType d : {DType::q8_0, DType::q4_k, DType::q6_k}) {
    CAPTURE(to_string(d));
    const std::int64_t out = 72, in = 2304, rows = 40;
    const std::vector<float> x = randn(std::size_t(rows * in), 11);
    std::vector<float> first;
    for (Isa isa : available_isas()) {
      CAPTURE(to_string(isa));
      std::vector<float> w;
      const Linear l = make(d, out, in, 5, isa, w);
      std::vector<float> all(std::size_t(rows * out));
      l.apply(x, all, false, 2);
      if (first.empty()) first = all;
      CHECK(same_bits(all, first));  // the same bits on every path (AVX-512 VNNI, AVX2, generic)
      for (std::int64_t r : {std::int64_t{0}, std::int64_t{17}, rows - 1})
        for (int threads : {1, 2}) {
          std::vector<float> one(static_cast<std::size_t>(out));
          l.apply(std::span(x).subspan(std::size_t(r * in), std::size_t(in)), one, false, threads);
          CHECK(std::memcmp(one.data(), all.data() + r * out, std::size_t(out) * 4) == 0);
        }
      std::vector<float> part(std::size_t(20 * out));  // rows 10..29 as a batch of their own
      l.apply(x.data() + 10 * in, 20, in, part.data(), out, false, 1);
      CHECK(std::memcmp(part.data(), all.data() + 10 * out, part.size() * 4) == 0);
    }
  }
}

TEST_CASE("linear int8: within quantization noise of fp32 activations; fp32 keeps the dequantized weights' bits") {
  for (DType d : {DType::q8_0, DType::q4_k, DType::q6_k}) {
    CAPTURE(to_string(d));
    const std::int64_t out = 64, in = 1024, rows = 20;
    std::vector<float> w;
    Linear l = make(d, out, in, 9, available_isas().front(), w);
    const std::vector<float> x = randn(std::size_t(rows * in), 12);
    std::vector<float> q8(std::size_t(rows * out)), f32(q8.size()), full(q8.size());
    l.apply(x, q8);
    l.set_activations(Activations::fp32);
    CHECK(l.activations() == Activations::fp32);
    l.apply(x, f32);
    const Linear dense(DType::f32, out, in, w.data());
    dense.apply(x, full);
    CHECK(same_bits(f32, full));
    // Each activation off by at most dx / 2 = amax / 254 (uniform: rms amax / 440, ~0.7 % of
    // a Gaussian row's rms on the 256 grid): the outputs' error is that noise through the
    // weights. Bounded by 1 % of the row's output norm, 3 % for these q4_k blocks, whose
    // random mins give every weight of a sub-block one offset the outputs partly cancel
    // (measured here: q8_0 and q6_k below 1 %, q4_k up to 1.5 %).
    for (std::int64_t r = 0; r < rows; ++r) {
      double e = 0, n = 0;
      for (std::int64_t o = 0; o < out; ++o) {
        const double a = q8[std::size_t(r * out + o)], b = f32[std::size_t(r * out + o)];
        e += (a - b) * (a - b);
        n += b * b;
      }
      CAPTURE(r);
      CHECK(std::sqrt(e / n) < (d == DType::q4_k ? 0.03 : 0.01));
    }
  }
}

TEST_CASE("linear int8: a NaN or infinite activation makes its row's outputs NaN; a zero block adds nothing") {
  for (DType d : {DType::q8_0, DType::q4_k, DType::q6_k})
    for (Isa isa : available_isas()) {
      CAPTURE(to_string(d));
      CAPTURE(to_string(isa));
      std::vector<float> w;
      const Linear l = make(d, 40, 512, 3, isa, w);
      std::vector<float> x = randn(3 * 512, 4);
      x[300] = std::numeric_limits<float>::quiet_NaN();
      x[512 + 7] = std::numeric_limits<float>::infinity();
      for (int k = 1024; k < 1024 + 256; ++k) x[std::size_t(k)] = 0;  // row 2: its first 256 values zero
      std::vector<float> y(3 * 40);
      l.apply(x, y);
      int nan = 0;
      for (int o = 0; o < 80; ++o) nan += std::isnan(y[std::size_t(o)]);
      CHECK(nan == 80);
      std::vector<float> tail(40);
      std::vector<float> x2(x.begin() + 1024, x.end());
      l.apply(x2, tail);
      CHECK(std::memcmp(tail.data(), y.data() + 80, 160) == 0);
      for (float v : tail) CHECK(std::isfinite(v));
    }
}

TEST_CASE("linear int8: the kernel names the integer tile; activations parse by name") {
  std::vector<float> w;
  const Linear l = make(DType::q4_k, 32, 256, 1, available_isas().front(), w);
  const std::string name = l.kernel();
  CHECK(!name.empty());
  Linear f = l;
  f.set_activations(Activations::fp32);
  CHECK(std::string(f.kernel()) != "none");
  CHECK(parse_activations("int8") == Activations::int8);
  CHECK(parse_activations("fp32") == Activations::fp32);
  CHECK(to_string(Activations::int8) == "int8");
  CHECK_THROWS_WITH_AS(parse_activations("int4"), doctest::Contains("int8"), InvalidArgument);
}
