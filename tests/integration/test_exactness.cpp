// The ring equals dense float64 attention for every ring size, layout, mask, head
// grouping and wire dtype; and the same job gives the same bytes twice.
//
// N = 203 is prime, so no P in 2..4 divides it and no 2P does either: every layout
// runs with uneven shards (contiguous and striped shards differ by one row, zigzag
// chunks too). The window (37) is shorter than a contiguous shard at P = 4 (51 rows),
// so some visiting blocks are fully masked and skipped, and longer than a zigzag
// chunk (25 rows), so windows straddle chunk boundaries.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>

#include "tests/integration/ring_case.hpp"

namespace ringattn::itest {
namespace {

constexpr double kTolF32 = 2e-5;   // O and lse, fp32 wire
constexpr double kTolBf16O = 1e-2;  // O, bf16 wire (inputs pre-rounded, so lse stays fp32-exact)
const char* const kLayouts[] = {"contiguous", "zigzag", "striped"};
const Mask kMasks[] = {Mask::none(), Mask::causal(), Mask::sliding_window(37)};

void check_matrix(std::int64_t kv_heads, DType dtype) {
  const Shape shape{203, 8, kv_heads, 64};
  ScratchDir dir;
  const Inputs in(shape, 7 + static_cast<unsigned>(kv_heads), dtype);
  in.write(dir);
  const double tol_o = dtype == DType::bf16 ? kTolBf16O : kTolF32;
  for (const Mask& mask : kMasks) {
    const Reference ref = dense_reference(in, mask);
    for (int p = 1; p <= 4; ++p) {
      for (const char* layout : kLayouts) {
        Job job;
        job.nodes = p;
        job.layout = layout;
        job.mask = mask;
        job.dtype = dtype;
        const auto what = describe(job, shape);
        const RingOutput r = run_job(dir, job);
        INFO(what);
        INFO(r.outcome.err);
        REQUIRE(r.outcome.exit_code == 0);
        CHECK(r.outcome.group_empty);
        const double err_o = max_abs_error(r.o, ref.o), err_lse = max_abs_error(r.lse, ref.lse);
        CHECK_MESSAGE(err_o <= tol_o, what << ": max |O - dense| = " << err_o);
        CHECK_MESSAGE(err_lse <= kTolF32, what << ": max |lse - dense| = " << err_lse);
        // Success leaves exactly the outputs: no temporary files, no work directory.
        CHECK(dir.entries() == std::vector<std::string>{"k.npy", "lse.npy", "o.npy", "q.npy", "v.npy"});
      }
    }
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("exact: MHA 8/8, fp32 wire, P 1..4 x every layout x none/causal/window") { check_matrix(8, DType::f32); }
TEST_CASE("exact: GQA 8/2, fp32 wire, P 1..4 x every layout x none/causal/window") { check_matrix(2, DType::f32); }
TEST_CASE("exact: MHA 8/8, bf16 wire, P 1..4 x every layout x none/causal/window") { check_matrix(8, DType::bf16); }
TEST_CASE("exact: GQA 8/2, bf16 wire, P 1..4 x every layout x none/causal/window") { check_matrix(2, DType::bf16); }

TEST_CASE("deterministic: the same job twice gives bit-identical O and lse") {
  // Every fold runs in the same order on every run (step s always folds the block of
  // rank r - s), and the kernel's tiling depends only on the shapes, so nothing may
  // differ, not even the last bit.
  struct Case {
    int nodes;
    const char* layout;
    Mask mask;
    std::int64_t kv;
    DType dtype;
  };
  const Case cases[] = {{3, "zigzag", Mask::causal(), 2, DType::bf16},
                        {4, "striped", Mask::sliding_window(37), 8, DType::f32},
                        {4, "contiguous", Mask::none(), 2, DType::f32}};
  for (const auto& c : cases) {
    const Shape shape{203, 8, c.kv, 64};
    ScratchDir dir;
    Inputs(shape, 11, c.dtype).write(dir);
    Job job;
    job.nodes = c.nodes;
    job.layout = c.layout;
    job.mask = c.mask;
    job.dtype = c.dtype;
    INFO(describe(job, shape));
    REQUIRE(run_job(dir, job).outcome.exit_code == 0);
    const std::string o1 = file_bytes(dir.file("o.npy")), lse1 = file_bytes(dir.file("lse.npy"));
    const RingOutput second = run_job(dir, job);
    REQUIRE(second.outcome.exit_code == 0);
    CHECK(!o1.empty());
    CHECK(o1 == file_bytes(dir.file("o.npy")));
    CHECK(lse1 == file_bytes(dir.file("lse.npy")));
  }
}

}  // namespace ringattn::itest
