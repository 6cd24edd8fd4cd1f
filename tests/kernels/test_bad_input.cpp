// Bad input to the kernel API: every case is an InvalidArgument whose message names the
// argument and the value, never undefined behaviour.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>

#include "attention_fixture.hpp"
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
