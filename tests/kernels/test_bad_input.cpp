// Bad input to the kernel API: every case is an InvalidArgument whose message names the
// argument and the value, never undefined behaviour.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "ringattn/block_backward.hpp"
#include "ringattn/error.hpp"
#include "ringattn/kv_cache.hpp"

using namespace ringattn;

namespace {
AttentionConfig good() {
  AttentionConfig c;
  c.heads = 8;
  c.kv_heads = 2;
  c.head_dim = 64;
  return c;
}
}  // namespace

TEST_CASE("config validation names the argument and the value") {
  auto c = good();
  c.kv_heads = 3;
  CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains("kv_heads = 3 does not divide heads = 8"), InvalidArgument);
  c = good();
  c.heads = 0;
  CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains("heads = 0"), InvalidArgument);
  c = good();
  c.head_dim = 100;
  CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains("head_dim = 100 is not supported"), InvalidArgument);
  c = good();
  c.mask = Mask::sliding_window(0);
  CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains("window = 0"), InvalidArgument);
  c = good();
  c.dtype = DType::f16;  // a weight dtype (ringattn::Linear), not attention's
  CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains("dtype = fp16: attention takes fp32 or bf16"), InvalidArgument);
  CHECK_THROWS_WITH_AS(KVCache(2, 64, DType::f16), doctest::Contains("K and V are held in fp32 or bf16"), InvalidArgument);
  CHECK_THROWS_WITH_AS(parse_dtype("fp16"), doctest::Contains("expected fp32 or bf16"), InvalidArgument);
  CHECK(parse_weights_dtype("fp16") == DType::f16);
  CHECK(to_string(DType::f16) == "fp16");
  c = good();
  c.scale = -1.0f;
  CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains("scale"), InvalidArgument);
  c = good();
  c.threads = -2;
  CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains("threads = -2"), InvalidArgument);
}

TEST_CASE("a forced ISA the CPU lacks, and a bad RINGATTN_ISA, are refused by name") {
  auto isas = available_isas();
  for (Isa i : {Isa::avx512, Isa::avx2, Isa::neon}) {
    if (std::find(isas.begin(), isas.end(), i) != isas.end()) continue;
    auto c = good();
    c.isa = i;
    CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains(std::string(to_string(i)).c_str()), InvalidArgument);
  }
  setenv("RINGATTN_ISA", "avx9000", 1);
  CHECK_THROWS_WITH_AS(BlockAttention{good()}, doctest::Contains("RINGATTN_ISA"), InvalidArgument);
  unsetenv("RINGATTN_ISA");
}

TEST_CASE("null, misaligned and mis-shaped buffers are refused") {
  BlockAttention attn(good());
  std::vector<float> q(4 * 8 * 64), kv(4 * 2 * 64);
  auto qp = Positions::contiguous(0, 4), kp = Positions::contiguous(0, 4);
  OnlineSoftmaxState st(4, 8, 64);
  CHECK_THROWS_WITH_AS(attn.fold(nullptr, qp, kv.data(), kv.data(), kp, st), doctest::Contains("q is a null pointer"), InvalidArgument);
  CHECK_THROWS_WITH_AS(attn.fold(q.data(), qp, nullptr, kv.data(), kp, st), doctest::Contains("k is a null pointer"), InvalidArgument);
  const void* odd = reinterpret_cast<const char*>(kv.data()) + 1;
  CHECK_THROWS_WITH_AS(attn.fold(q.data(), qp, kv.data(), odd, kp, st), doctest::Contains("v is not aligned to 4 bytes"), InvalidArgument);
  OnlineSoftmaxState wrong(5, 8, 64);
  CHECK_THROWS_WITH_AS(attn.fold(q.data(), qp, kv.data(), kv.data(), kp, wrong), doctest::Contains("state is [5, 8, 64]"), InvalidArgument);
}

TEST_CASE("positions must be increasing with positive strides") {
  CHECK_THROWS_WITH_AS(Positions({{10, 1, 5}, {12, 1, 5}}), doctest::Contains("not after the previous position 14"), InvalidArgument);
  CHECK_THROWS_WITH_AS(Positions::strided(0, 0, 5), doctest::Contains("stride 0"), InvalidArgument);
  CHECK_THROWS_WITH_AS(Positions::contiguous(-1, 5), doctest::Contains("-1"), InvalidArgument);
  auto zig = Positions({{0, 1, 4}, {28, 1, 4}});
  CHECK(zig.size() == 8);
  CHECK(zig.at(5) == 29);
  CHECK_THROWS_AS(zig.at(8), InvalidArgument);
}

// Issue 45: every size a caller passes is checked without overflow before anything is
// sized, read or written.
TEST_CASE("positions: a row count past INT64_MAX and a row outside the block are refused") {
  constexpr std::int64_t kHalf = std::int64_t{1} << 62;
  // 2^62 + 2^62 rows, every position a valid int64: the count wrapped to INT64_MIN.
  CHECK_THROWS_WITH_AS(Positions({{0, 1, kHalf}, {kHalf, 1, kHalf}}), doctest::Contains("past INT64_MAX"),
                       InvalidArgument);
  const auto p = Positions({{0, 1, kHalf}, {kHalf, 1, kHalf - 1}});  // the most that fit
  CHECK(p.size() == INT64_MAX);
  CHECK(p.at(kHalf) == kHalf);
  auto zig = Positions({{0, 1, 4}, {28, 1, 4}});
  CHECK_THROWS_WITH_AS(zig.at(-1), doctest::Contains("row -1 is out of range (8 rows)"), InvalidArgument);
  CHECK_THROWS_WITH_AS(zig.at(8), doctest::Contains("row 8 is out of range"), InvalidArgument);
}

TEST_CASE("softmax state: shapes whose products overflow, and arrays that do not match the fields, are refused") {
  // rows * heads * head_dim = 2^72: wrapped, it sized o small and fold wrote past it.
  CHECK_THROWS_WITH_AS(OnlineSoftmaxState(std::int64_t{1} << 40, 1 << 16, 1 << 16), doctest::Contains("2^40 elements"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(OnlineSoftmaxState(1, std::int64_t{1} << 17, 64), doctest::Contains("1..65536"), InvalidArgument);
  CHECK_THROWS_WITH_AS(OnlineSoftmaxState(1, 8, std::int64_t{1} << 32), doctest::Contains("1..65536"), InvalidArgument);
  OnlineSoftmaxState s(4, 8, 64);
  CHECK_THROWS_WITH_AS(s.reset(std::int64_t{1} << 40, 1 << 16, 1 << 16), doctest::Contains("2^40 elements"),
                       InvalidArgument);
  CHECK(s.o.size() == 4 * 8 * 64);  // a refused reset leaves the state as it was

  // The fields are public: a caller that changes them without the arrays is refused by
  // fold, merge and finalize, which index the arrays by them.
  std::vector<float> out(4 * 8 * 64), lse(4 * 8);
  OnlineSoftmaxState grown(4, 8, 64);
  grown.rows = 1000;
  CHECK_THROWS_WITH_AS(finalize(grown, out.data(), lse.data()), doctest::Contains("finalize: the state's shape [1000, 8, 64]"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(merge(grown, grown), doctest::Contains("merge: the state's shape"), InvalidArgument);
  OnlineSoftmaxState short_o(4, 8, 64);
  short_o.o.resize(10);
  CHECK_THROWS_WITH_AS(merge(s, short_o), doctest::Contains("o 10 elements"), InvalidArgument);
  BlockAttention attn(good());
  std::vector<float> q(4 * 8 * 64), kv(4 * 2 * 64);
  const auto pos = Positions::contiguous(0, 4);
  CHECK_THROWS_WITH_AS(attn.fold(q.data(), pos, kv.data(), kv.data(), pos, short_o), doctest::Contains("block attention: the state's shape"),
                       InvalidArgument);
  OnlineSoftmaxState wrapped(4, 8, 64);  // rows * heads wraps to 32 mod 2^64
  wrapped.rows = (std::int64_t{1} << 61) + 4;
  CHECK_THROWS_AS(finalize(wrapped, nullptr, nullptr), InvalidArgument);
  finalize(s, out.data(), lse.data());  // a state made by the constructor still finalizes
  CHECK(lse[0] == -std::numeric_limits<float>::infinity());
}

TEST_CASE("attention_backward_delta: threads and shapes are checked as Linear::apply's") {
  std::vector<float> o(2 * 4 * 64), d_o(o.size()), delta(2 * 4);
  for (const int threads : {-1, kMaxThreads + 1})
    CHECK_THROWS_WITH_AS(attention_backward_delta(o.data(), d_o.data(), 2, 4, 64, delta.data(), threads),
                         doctest::Contains(("threads = " + std::to_string(threads)).c_str()), InvalidArgument);
  CHECK_THROWS_WITH_AS(attention_backward_delta(o.data(), d_o.data(), std::int64_t{1} << 40, 1 << 16, 1 << 16,
                                                delta.data(), 1),
                       doctest::Contains("address space"), InvalidArgument);
  attention_backward_delta(o.data(), d_o.data(), 2, 4, 64, delta.data(), 1);
  CHECK(delta[0] == 0.0f);
}
