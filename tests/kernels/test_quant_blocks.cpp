// GGUF's k-quant blocks (include/ringattn/blocks.hpp) and ringattn::Linear holding them:
// decoded as llama.cpp's dequantize_row_q4_K / _q6_K (each block built here from chosen
// scales and q by llama.cpp's packing, its values computed by the formula); a Linear of
// q4_k or q6_k blocks gives the bits of an fp32 Linear of the decoded values on every path,
// whatever the rows (up to 16: decode's loop unpacking in registers; more: unpacked to
// floats once for the row tiles) and the K runs; a Linear of runs in several dtypes (a Q4_K_M file's
// Q4_K Q and K beside its Q6_K V) equals its runs side by side.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ringattn/block_attention.hpp"
#include "ringattn/blocks.hpp"
#include "ringattn/error.hpp"
#include "ringattn/half.hpp"
#include "ringattn/linear.hpp"
#include "quant_fixture.hpp"

using namespace ringattn;

using namespace ringattn::test;

TEST_CASE("blocks: q4_k and q6_k decode as llama.cpp's dequantize_row_q4_K / _q6_K, bit for bit") {
  CHECK(block_values(DType::q4_k) == 256);
  CHECK(block_bytes(DType::q4_k) == 144);
  CHECK(block_values(DType::q6_k) == 256);
  CHECK(block_bytes(DType::q6_k) == 210);
  CHECK(block_values(DType::q8_0) == 32);
  CHECK(block_bytes(DType::q8_0) == 34);
  CHECK(block_values(DType::bf16) == 1);
  for (DType d : {DType::q4_k, DType::q6_k}) {
    CAPTURE(to_string(d));
    const Matrix m = random_matrix(d, 1, 256 * 16, 7);
    REQUIRE(m.bytes.size() == std::size_t(16 * block_bytes(d)));
    std::vector<float> got(m.values.size());
    decode_blocks(d, m.bytes.data(), 256 * 16, got.data());
    CHECK(same_bits(got, m.values));
  }
  // The extremes: every 6-bit scale and min 63, q 15 (q4_k); scale -128, q 0 and 63 (q6_k).
  Q4K hi{to_f16(1.0f), to_f16(0.5f), {}, {}, {}};
  for (int t = 0; t < 8; ++t) hi.sc[t] = hi.m[t] = 63;
  for (auto& q : hi.q) q = 15;
  float v[256];
  decode_blocks(DType::q4_k, hi.bytes().data(), 256, v);
  CHECK(v[0] == 63.0f * 15 - 31.5f);
  CHECK(v[255] == 63.0f * 15 - 31.5f);
  Q6K lo{to_f16(0.25f), {}, {}};
  for (auto& s : lo.sc) s = -128;
  for (int k = 0; k < 256; ++k) lo.q[k] = k % 2 ? 63 : 0;
  decode_blocks(DType::q6_k, lo.bytes().data(), 256, v);
  CHECK(v[0] == 1024.0f);  // (0.25 * -128) * (0 - 32)
  CHECK(v[1] == -992.0f);  // (0.25 * -128) * 31
}

TEST_CASE("linear: q4_k and q6_k blocks with fp32 activations give the bits of fp32 weights holding their values, on every path") {
  for (DType d : {DType::q4_k, DType::q6_k})
    for (Isa isa : available_isas())
      for (auto [out, in, rows] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{33, 256, 1},
                                   {70, 512, 3}, {70, 512, 13}, {40, 256, 16}, {96, 256, 4},
                                   {40, 2304, 20}, {64, 256, 400}}) {
        CAPTURE(to_string(d));
        CAPTURE(to_string(isa));
        CAPTURE(out);
        CAPTURE(in);
        const Matrix m = random_matrix(d, out, in, unsigned(out + in));
        const Linear::Block block{d, m.bytes.data(), out};
        Linear q(std::nullopt, in, std::span<const Linear::Block>(&block, 1), isa);
        q.set_activations(Activations::fp32);  // x as it is (test_int_blocks.cpp: the int8 default)
        CHECK(q.dtype() == d);
        CHECK_FALSE(q.mixed());
        // Held as blocks: 4.75 (q4_k) or 6.6 (q6_k) bits a weight, beside the file's 4.5 and 6.56.
        CHECK(q.packed().size() == std::size_t((out + 31) / 32 * (in / 256) * (d == DType::q4_k ? 1216 : 1696) * 4));
        const Linear full(DType::f32, out, in, m.values.data(), isa);
        const std::vector<float> x = randn(std::size_t(rows * in), 9);
        std::vector<float> a(std::size_t(rows * out)), b(a.size());
        q.apply(x, a, false, 2);
        full.apply(x, b, false, 2);
        CHECK(same_bits(a, b));
        q.apply(x, a, true, 1);  // add: the sum formed first, then added
        full.apply(x, b, true, 1);
        CHECK(same_bits(a, b));
        // Rows back (a tied embedding's lookup), and held widened: the values themselves.
        std::vector<float> row(static_cast<std::size_t>(in));
        for (std::int64_t o : {std::int64_t{0}, out / 2, out - 1}) {
          q.row(o, row);
          CHECK(std::memcmp(row.data(), m.values.data() + o * in, std::size_t(in) * 4) == 0);
        }
        const Linear widened(DType::f32, in, std::span<const Linear::Block>(&block, 1), isa);
        REQUIRE(widened.packed().size() == full.packed().size());
        CHECK(std::memcmp(widened.packed().data(), full.packed().data(), full.packed().size()) == 0);
      }
}

TEST_CASE("linear: runs of rows in their own dtypes (q4_k, q6_k, bf16) equal the runs side by side") {
  const std::int64_t in = 512, rows = 5;
  const Matrix q = random_matrix(DType::q4_k, 64, in, 1), k = random_matrix(DType::q4_k, 32, in, 2),
               v = random_matrix(DType::q6_k, 32, in, 3);
  const std::vector<float> tail = randn(std::size_t(8 * in), 4);
  std::vector<std::uint16_t> tail_bf16(tail.size());
  to_bf16(tail.data(), tail_bf16.data(), static_cast<std::int64_t>(tail.size()));
  const Linear::Block blocks[] = {{DType::q4_k, q.bytes.data(), 64},
                                  {DType::q4_k, k.bytes.data(), 32},
                                  {DType::q6_k, v.bytes.data(), 32},
                                  {DType::bf16, tail_bf16.data(), 8}};
  const Linear mixed(std::nullopt, in, std::span<const Linear::Block>(blocks));
  CHECK(mixed.mixed());
  CHECK(mixed.out() == 136);
  CHECK(mixed.dtype() == DType::q4_k);
  const Linear qk(std::nullopt, in, std::span<const Linear::Block>(blocks, 2));
  const Linear vv(std::nullopt, in, std::span<const Linear::Block>(blocks + 2, 1));
  const Linear tt(std::nullopt, in, std::span<const Linear::Block>(blocks + 3, 1));
  CHECK(mixed.packed().size() == qk.packed().size() + vv.packed().size() + tt.packed().size());
  const std::vector<float> x = randn(std::size_t(rows * in), 5);
  std::vector<float> y(std::size_t(rows * 136)), want(y.size());
  mixed.apply(x.data(), rows, in, y.data(), 136);
  qk.apply(x.data(), rows, in, want.data(), 136);
  vv.apply(x.data(), rows, in, want.data() + 96, 136);
  tt.apply(x.data(), rows, in, want.data() + 128, 136);
  CHECK(same_bits(y, want));
  std::vector<float> row(static_cast<std::size_t>(in)), want_row(static_cast<std::size_t>(in));
  mixed.row(100, row);
  vv.row(4, want_row);
  CHECK(same_bits(row, want_row));
  // Held in one dtype, the runs convert: q4_k and q6_k to bf16 as their values round.
  const Linear as_bf16(DType::bf16, in, std::span<const Linear::Block>(blocks));
  CHECK_FALSE(as_bf16.mixed());
  CHECK(as_bf16.dtype() == DType::bf16);
}

TEST_CASE("linear: q4_k and q6_k are held only from their own blocks, of whole super-blocks") {
  const std::vector<float> w(2 * 256, 0.5f);
  CHECK_THROWS_WITH_AS(Linear(DType::q4_k, 256, {std::span<const float>(w)}),
                       doctest::Contains("q4_k weights come only from q4_k blocks"), InvalidArgument);
  const Matrix m = random_matrix(DType::q6_k, 2, 256, 1);
  const Linear::Block block{DType::q6_k, m.bytes.data(), 2};
  CHECK_THROWS_WITH_AS(Linear(DType::q4_k, 256, std::span<const Linear::Block>(&block, 1)),
                       doctest::Contains("not from q6_k"), InvalidArgument);
  const Linear::Block ragged{DType::q4_k, m.bytes.data(), 1};
  CHECK_THROWS_WITH_AS(Linear(std::nullopt, 300, std::span<const Linear::Block>(&ragged, 1)),
                       doctest::Contains("multiple of 256"), InvalidArgument);
}
