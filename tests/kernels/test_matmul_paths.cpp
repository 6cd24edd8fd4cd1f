// The matmul paths of a bf16 call, and the ISA caps the CI matrix relies on.
//
// A bf16 call multiplies in bf16 where the CPU has bf16 matmul units and otherwise fp32
// operands widened from bf16 inside the kernel's tile copies. Both must give dense
// attention of the bf16 inputs; the fp32 path at least as accurately as the bf16 one
// (its P is not rounded to bf16). On a CPU without bf16 units only the fp32 path exists
// and forcing bf16 is refused with the reason.
//
// The CI matrix runs the suites with ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) and
// RINGATTN_ISA set, pretending to be a smaller CPU. A cap that silently did nothing would
// make that matrix prove nothing, so when they are set these tests check that oneDNN and
// the kernels really run the capped paths.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "tests/kernels/attention_fixture.hpp"
#include "ringattn/error.hpp"

namespace {

using namespace fixture;

// The instruction sets a oneDNN cap may name, smallest first (oneDNN 2.6's names).
const char* const kOnednnIsas[] = {"sse41", "avx", "avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni",
                                   "avx512_core_bf16", "avx512_core_amx"};

int rank_of(const std::string& isa) {
  for (int i = 0; i < static_cast<int>(std::size(kOnednnIsas)); ++i)
    if (isa == kOnednnIsas[i]) return i;
  return -1;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// O and lse of a bf16 fold of p with matmuls in `mm`, and their errors against float64
// dense attention of the bf16 values themselves.
Errors bf16_fold_error(Problem p, DType mm) {
  AttentionConfig c = p.config(std::nullopt);
  c.matmul_dtype = mm;
  c.threads = 1;
  BlockAttention attn(c);
  CHECK(attn.matmul_dtype() == mm);
  OnlineSoftmaxState st(p.nq, p.heads, p.head_dim);
  attn.fold(p.qp(), p.q_pos(), p.kp(0), p.vp(0), p.k_pos(0, p.nk), st);
  std::vector<float> out(st.o.size()), lse(st.m.size());
  finalize(st, out.data(), lse.data());
  // The reference sees exactly the kernel's inputs: the bf16 values, widened.
  from_bf16(p.qh.data(), p.q.data(), static_cast<std::int64_t>(p.q.size()));
  from_bf16(p.kh.data(), p.k.data(), static_cast<std::int64_t>(p.k.size()));
  from_bf16(p.vh.data(), p.v.data(), static_cast<std::int64_t>(p.v.size()));
  std::vector<double> rout, rlse;
  p.reference(rout, rlse);
  return compare(out, lse, rout, rlse);
}

}  // namespace

TEST_CASE("bf16 calls on the fp32 matmul path: exact to fp32 rounding, at least as accurate as bf16 matmuls") {
  for (Mask mask : {Mask::none(), Mask::causal(), Mask::sliding_window(300)}) {
    CAPTURE(to_string(mask));
    Problem p{700, 1100, 4, 2, 64, mask, 400, 0, DType::bf16, 5};
    p.make();
    const Errors f32 = bf16_fold_error(p, DType::f32);
    CHECK_FALSE(f32.nan);
    // The products of bf16 values are exact in fp32, so only fp32 accumulation remains.
    CHECK(f32.out <= 2e-5);
    CHECK(f32.lse <= 2e-5);
    if (bf16_matmul_dtype() == DType::bf16) {
      const Errors b16 = bf16_fold_error(p, DType::bf16);
      CHECK(b16.out <= 1e-2);  // the bf16 tolerance the ring's tests use
      CHECK(f32.out <= b16.out);
      CHECK(f32.lse <= b16.lse + 1e-6);
    }
  }
}

TEST_CASE("a bf16 call's default matmul path is bf16 exactly where the CPU has bf16 matmul units") {
  AttentionConfig c;
  c.heads = c.kv_heads = 2;
  c.head_dim = 64;
  c.dtype = DType::bf16;
  BlockAttention attn(c);
  CHECK(attn.matmul_dtype() == bf16_matmul_dtype());
  const std::string impl = matmul_implementation(DType::bf16);
  INFO("oneDNN ISA " << matmul_isa() << ", bf16 calls: " << impl);
  if (bf16_matmul_dtype() == DType::bf16) {
    CHECK(rank_of(matmul_isa()) >= rank_of("avx512_core_bf16"));
    CHECK(impl.rfind("brg:", 0) == 0);
  } else {
    CHECK(bf16_path().find("fp32 matmuls") != std::string::npos);
    c.matmul_dtype = DType::bf16;  // forcing bf16 where there is none: refused, naming why
    CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains("no bf16 matmul units"), InvalidArgument);
  }
  // fp32 calls multiply fp32, always.
  c.dtype = DType::f32;
  c.matmul_dtype = DType::bf16;
  CHECK_THROWS_WITH_AS(BlockAttention{c}, doctest::Contains("fp32 call"), InvalidArgument);
  c.matmul_dtype.reset();
  CHECK(BlockAttention(c).matmul_dtype() == DType::f32);
}

TEST_CASE("ISA caps in the environment take effect (the CI matrix pretends to be a smaller CPU)") {
  const char* onednn = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!onednn || !*onednn) onednn = std::getenv("DNNL_MAX_CPU_ISA");
  const std::string have = matmul_isa();
  INFO("oneDNN's effective ISA: " << have << "; fp32 matmuls: " << matmul_implementation(DType::f32));
  REQUIRE(rank_of(have) >= 0);
  if (onednn && *onednn && lower(onednn) != "all") {
    const std::string cap = lower(onednn);
    INFO("cap: " << cap);
    REQUIRE(rank_of(cap) >= 0);
    CHECK(rank_of(have) <= rank_of(cap));  // at most the cap (less only on a smaller CPU)
    if (rank_of(cap) < rank_of("avx512_core")) {
      CHECK(matmul_implementation(DType::f32).find("avx512") == std::string::npos);
      CHECK(bf16_matmul_dtype() == DType::f32);
    }
  }
  if (const char* ours = std::getenv("RINGATTN_ISA"); ours && *ours) {
    CHECK(to_string(default_isa()) == std::string(ours));
    AttentionConfig c;
    c.heads = c.kv_heads = 1;
    c.head_dim = 32;
    CHECK(to_string(BlockAttention(c).isa()) == std::string(ours));
  }
}
