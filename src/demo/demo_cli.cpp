// `ringattn demo` — one process, no network: generates Q/K/V, runs the block-attention
// kernel over the whole sequence and checks it against the float64 dense reference.
// It is the smallest end-to-end proof that the kernel on this machine is exact and fast.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../cli/timing.hpp"
#include "../oracle/random_inputs.hpp"
#include "../oracle/reference.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "../cli/args.hpp"

namespace ringattn::cli {

int demo_main(const std::vector<std::string>& argv) {
  Args a("demo", "Single-process check: the block-attention kernel against dense float64 attention.");
  a.option("seq", "N", "tokens", "2048")
      .option("heads", "N", "query heads", "8")
      .option("kv-heads", "N", "key/value heads", "2")
      .option("head-dim", "N", "head dimension", "128")
      .option("dtype", "T", "fp32 or bf16", "fp32")
      .option("threads", "N", "OpenMP threads (0: all cores)", "0")
      .option("isa", "NAME", "force an ISA path")
      .flag("causal", "causal mask");
  if (!a.parse(argv)) return 0;
  AttentionConfig cfg;
  const std::int64_t n = a.int64("seq");
  if (n < 1) throw InvalidArgument("demo: --seq must be >= 1, got " + std::to_string(n));
  cfg.heads = a.int64("heads");
  cfg.kv_heads = a.int64("kv-heads");
  cfg.head_dim = a.int64("head-dim");
  cfg.dtype = parse_dtype(a.str("dtype"));
  cfg.threads = a.integer("threads", 0, kMaxThreads);
  cfg.mask = a.has("causal") ? Mask::causal() : Mask::none();
  if (auto i = a.maybe("isa")) cfg.isa = parse_isa(*i);
  BlockAttention attn(cfg);  // validates the shape before anything is allocated

  auto make = [&](std::int64_t heads, unsigned seed) {
    return oracle::random_normal(static_cast<std::size_t>(n * heads * cfg.head_dim), seed);
  };
  auto q = make(cfg.heads, 1), k = make(cfg.kv_heads, 2), v = make(cfg.kv_heads, 3);
  std::vector<std::uint16_t> qh, kh, vh;
  const bool bf16 = cfg.dtype == DType::bf16;
  if (bf16) {  // the reference sees what the kernel sees
    qh = oracle::round_to_bf16(q);
    kh = oracle::round_to_bf16(k);
    vh = oracle::round_to_bf16(v);
  }
  const void* qp = bf16 ? static_cast<const void*>(qh.data()) : q.data();
  const void* kp = bf16 ? static_cast<const void*>(kh.data()) : k.data();
  const void* vp = bf16 ? static_cast<const void*>(vh.data()) : v.data();
  const auto pos = Positions::contiguous(0, n);

  OnlineSoftmaxState st(n, cfg.heads, cfg.head_dim);
  FoldStats fs;
  const double secs = cli::median_seconds([&] {
    st.reset();
    fs = attn.fold(qp, pos, kp, vp, pos, st);
  });
  std::vector<float> out(st.o.size()), lse(st.m.size());
  finalize(st, out.data(), lse.data());

  std::vector<double> ref(out.size()), ref_lse(lse.size());
  oracle::dense_attention_f64({cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.mask, 0.0}, q.data(), pos, k.data(),
                               v.data(), pos, ref.data(), ref_lse.data());
  double err = 0, err_lse = 0;
  for (std::size_t i = 0; i < out.size(); ++i) err = std::fmax(err, std::fabs(out[i] - ref[i]));
  for (std::size_t i = 0; i < lse.size(); ++i) err_lse = std::fmax(err_lse, std::fabs(lse[i] - ref_lse[i]));
  const double tol = bf16 ? 1e-2 : 2e-5;
  std::printf("ringattn demo: seq %lld, heads %lld/%lld, head_dim %lld, %s, %s, isa %s\n",
              static_cast<long long>(n), static_cast<long long>(cfg.heads), static_cast<long long>(cfg.kv_heads),
              static_cast<long long>(cfg.head_dim), std::string(to_string(cfg.dtype)).c_str(),
              to_string(cfg.mask).c_str(), std::string(to_string(attn.isa())).c_str());
  std::printf("  max |O - O_ref| = %.3g   max |lse - lse_ref| = %.3g   (tolerance %.0e)\n", err, err_lse, tol);
  std::printf("  kernel %.2f ms, %.1f GFLOP/s (useful FLOPs)\n", secs * 1e3, fs.useful_flops / secs / 1e9);
  if (!(err <= tol) || !(err_lse <= 2e-5)) {
    std::printf("  FAIL: error above tolerance\n");
    return 1;
  }
  std::printf("  OK: matches dense attention\n");
  return 0;
}

}  // namespace ringattn::cli
