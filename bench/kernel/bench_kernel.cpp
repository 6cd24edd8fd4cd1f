// `ringattn bench kernel` — the block-attention kernel against two baselines measured
// in the same run:
//   roofline: bare oneDNN matmuls doing the same FLOPs (Q K^T and P V per head, whole
//             b x b products on dense operands, no softmax) — what the matmul engine
//             alone reaches;
//   naive:    the textbook way — materialise the b x b scores per head (oneDNN matmul),
//             row softmax in plain C++ (std::exp), then P V (oneDNN matmul).
// One JSON object per line on stdout, each with the command that made it; progress on
// stderr (the "bench" logger: --quiet silences it).
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dense_matmul.hpp"
#include "ringattn/block_backward.hpp"
#include "../common/machine.hpp"
#include "../common/shell_command.hpp"
#include "../../src/cli/timing.hpp"
#include "ringattn/split.hpp"
#include "../../src/oracle/random_inputs.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "../../src/cli/log.hpp"
#include "../../src/cli/args.hpp"
#include "../../src/cli/json_object.hpp"

namespace ringattn::cli {
int bench_kernel_main(const std::vector<std::string>& argv);
}

namespace {

using namespace ringattn;

struct Case {
  std::int64_t b, heads, kv_heads, head_dim;
  DType dtype;
  Mask mask;
  int threads;
  std::optional<Isa> isa;
};

struct Inputs {
  std::vector<float> q, k, v;
  std::vector<std::uint16_t> qh, kh, vh;
  const void* qp(DType d) const { return d == DType::bf16 ? static_cast<const void*>(qh.data()) : q.data(); }
  const void* kp(DType d) const { return d == DType::bf16 ? static_cast<const void*>(kh.data()) : k.data(); }
  const void* vp(DType d) const { return d == DType::bf16 ? static_cast<const void*>(vh.data()) : v.data(); }
};

Inputs make_inputs(const Case& c) {
  Inputs in;
  in.q = oracle::random_normal(static_cast<std::size_t>(c.b * c.heads * c.head_dim), 42);
  in.k = oracle::random_normal(static_cast<std::size_t>(c.b * c.kv_heads * c.head_dim), 43);
  in.v = oracle::random_normal(static_cast<std::size_t>(c.b * c.kv_heads * c.head_dim), 44);
  if (c.dtype == DType::bf16) {
    in.qh = oracle::round_to_bf16(in.q);
    in.kh = oracle::round_to_bf16(in.k);
    in.vh = oracle::round_to_bf16(in.v);
  }
  return in;
}

// Whole-block matmuls per head on dense operands (the layout oneDNN is fastest on):
// S = Q_h K_g^T (b x b), O_h = S V_g (b x d). Operands are repacked per head before the
// timed region, so the roofline is the matmul engine alone.
// The matmuls run in the type the kernel's run in: a bf16 call on a CPU without bf16
// units multiplies fp32 (its bf16 inputs widened), so its roofline is the fp32 matmul's.
struct DenseMatmuls {
  bench::DenseMatmul qk, pv;
  DType mm;
  std::vector<float> s, o;
  std::vector<std::uint16_t> s_bf16;
  std::vector<std::vector<char>> q, kt, v;  // per head / per kv head, dense
  DenseMatmuls(const Case& c, const Inputs& given) {
    mm = c.dtype == DType::bf16 ? bf16_matmul_dtype() : DType::f32;
    Inputs widened;  // a bf16 case multiplied in fp32: the bf16 values, widened
    if (c.dtype == DType::bf16 && mm == DType::f32)
      for (auto [from, to] : {std::pair{&given.qh, &widened.q}, {&given.kh, &widened.k}, {&given.vh, &widened.v}}) {
        to->resize(from->size());
        from_bf16(from->data(), to->data(), static_cast<std::int64_t>(from->size()));
      }
    const Inputs& in = c.dtype == DType::bf16 && mm == DType::f32 ? widened : given;
    qk = bench::DenseMatmul(c.b, c.b, c.head_dim, mm, c.threads);       // S = Q_h K_g^T
    pv = bench::DenseMatmul(c.b, c.head_dim, c.b, mm, c.threads);       // O_h = S V_g
    s.resize(static_cast<std::size_t>(c.b * c.b));
    o.resize(static_cast<std::size_t>(c.b * c.head_dim));
    if (mm == DType::bf16) s_bf16.resize(s.size());
    const std::size_t esz = dtype_size(mm);
    const std::size_t tile = static_cast<std::size_t>(c.b * c.head_dim) * esz;
    auto gather = [&](const void* src, std::int64_t heads, std::int64_t h, bool transpose) {
      std::vector<char> out(tile);
      const char* base = static_cast<const char*>(src);
      for (std::int64_t r = 0; r < c.b; ++r)
        for (std::int64_t x = 0; x < c.head_dim; ++x) {
          const std::size_t from = static_cast<std::size_t>((r * heads + h) * c.head_dim + x) * esz;
          const std::size_t to = static_cast<std::size_t>(transpose ? x * c.b + r : r * c.head_dim + x) * esz;
          std::memcpy(out.data() + to, base + from, esz);
        }
      return out;
    };
    for (std::int64_t h = 0; h < c.heads; ++h) q.push_back(gather(in.qp(mm), c.heads, h, false));
    for (std::int64_t g = 0; g < c.kv_heads; ++g) {
      kt.push_back(gather(in.kp(mm), c.kv_heads, g, true));
      v.push_back(gather(in.vp(mm), c.kv_heads, g, false));
    }
  }
};

double roofline_seconds(const Case& c, DenseMatmuls& mm) {
  const std::int64_t G = c.heads / c.kv_heads;
  return cli::median_seconds([&] {
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const auto g = static_cast<std::size_t>(h / G);
      mm.qk.run(mm.q[static_cast<std::size_t>(h)].data(), mm.kt[g].data(), mm.s.data());
      const void* p = mm.mm == DType::bf16 ? static_cast<const void*>(mm.s_bf16.data()) : mm.s.data();
      mm.pv.run(p, mm.v[g].data(), mm.o.data());
    }
  });
}

// The backward's roofline: its five matmuls per head as bare dense ones, S = Q Kᵀ and
// dP = dO Vᵀ of the scores' shape, dV = Pᵀ dO, dK = dSᵀ Q and dQ = dS K of P V's (every
// operand dense and untransposed: the best case for oneDNN).
double backward_roofline_seconds(const Case& c, DenseMatmuls& mm) {
  const std::int64_t G = c.heads / c.kv_heads;
  return cli::median_seconds([&] {
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const auto g = static_cast<std::size_t>(h / G);
      const void* p = mm.mm == DType::bf16 ? static_cast<const void*>(mm.s_bf16.data()) : mm.s.data();
      mm.qk.run(mm.q[static_cast<std::size_t>(h)].data(), mm.kt[g].data(), mm.s.data());
      mm.qk.run(mm.q[static_cast<std::size_t>(h)].data(), mm.kt[g].data(), mm.s.data());
      for (int i = 0; i < 3; ++i) mm.pv.run(p, mm.v[g].data(), mm.o.data());
    }
  });
}

double naive_seconds(const Case& c, DenseMatmuls& mm) {
  const std::int64_t G = c.heads / c.kv_heads, b = c.b;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return cli::median_seconds([&] {
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const auto g = static_cast<std::size_t>(h / G);
      mm.qk.run(mm.q[static_cast<std::size_t>(h)].data(), mm.kt[g].data(), mm.s.data());
#pragma omp parallel for num_threads(c.threads) schedule(static)
      for (std::int64_t i = 0; i < b; ++i) {
        float* row = mm.s.data() + i * b;
        const std::int64_t visible = c.mask.kind == MaskKind::causal ? i + 1 : b;
        float mx = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j < visible; ++j) mx = std::max(mx, row[j] * scale);
        float sum = 0;
        for (std::int64_t j = 0; j < visible; ++j) sum += (row[j] = std::exp(row[j] * scale - mx));
        for (std::int64_t j = 0; j < visible; ++j) row[j] /= sum;
        for (std::int64_t j = visible; j < b; ++j) row[j] = 0;
      }
      const void* p = mm.s.data();
      if (mm.mm == DType::bf16) {
        to_bf16(mm.s.data(), mm.s_bf16.data(), b * b);
        p = mm.s_bf16.data();
      }
      mm.pv.run(p, mm.v[g].data(), mm.o.data());
    }
  });
}

// The backward kernel over one block (BlockAttentionBackward::accumulate), D computed once
// before the timed region as the backward ring does; lse from a forward fold.
void run_backward_case(const Case& c, const std::string& command) {
  omp_set_num_threads(c.threads);
  const Inputs in = make_inputs(c);
  const AttentionConfig cfg{{c.heads, c.kv_heads, c.head_dim, c.dtype, c.mask, 0.0f}, c.threads, c.isa, std::nullopt};
  BlockAttention attn(cfg);
  BlockAttentionBackward bwd(cfg);
  OnlineSoftmaxState st(c.b, c.heads, c.head_dim);
  const auto pos = Positions::contiguous(0, c.b);
  attn.fold(in.qp(c.dtype), pos, in.kp(c.dtype), in.vp(c.dtype), pos, st);
  std::vector<float> o(st.o.size()), lse(st.m.size()), delta(lse.size());
  finalize(st, o.data(), lse.data());
  std::vector<float> d_o = oracle::random_normal(o.size(), 45);
  std::vector<std::uint16_t> d_o16;
  if (c.dtype == DType::bf16) d_o16 = oracle::round_to_bf16(d_o);
  attention_backward_delta(o.data(), d_o.data(), c.b, c.heads, c.head_dim, delta.data(), c.threads);
  std::vector<float> dq(o.size()), dk(in.k.size()), dv(in.k.size());
  const void* dop = c.dtype == DType::bf16 ? static_cast<const void*>(d_o16.data()) : d_o.data();
  GradientStats bs;
  const double t_kernel = cli::median_seconds([&] {
    bs = bwd.accumulate(in.qp(c.dtype), pos, {}, in.kp(c.dtype), in.vp(c.dtype), pos, {}, dop, lse.data(),
                        delta.data(), dq.data(), dk.data(), dv.data());
  });
  DenseMatmuls mm(c, in);
  const double full_flops = 10.0 * static_cast<double>(c.b * c.b * c.heads * c.head_dim);
  const double t_roof = backward_roofline_seconds(c, mm);
  const double gflops = bs.useful_flops / t_kernel / 1e9, roof = full_flops / t_roof / 1e9;
  cli::JsonObject j;
  j.add("bench", "kernel_backward");
  bench::add_machine(j, c.dtype, bwd.isa());
  j.add("dtype", to_string(c.dtype)).add("b", c.b).add("heads", c.heads).add("kv_heads", c.kv_heads);
  j.add("head_dim", c.head_dim).add("mask", to_string(c.mask)).add("threads", c.threads);
  j.add("seconds", t_kernel).add("gflops", gflops).add("roofline_gflops", roof).add("roofline_seconds", t_roof);
  j.add("efficiency", gflops / roof).add("tiles_computed", bs.tiles_computed).add("tiles_skipped", bs.tiles_skipped);
  j.add("command", command);
  std::printf("%s\n", j.str().c_str());
  std::fflush(stdout);
}

void run_case(const Case& c, bool with_naive, const std::string& command) {
  omp_set_num_threads(c.threads);
  const Inputs in = make_inputs(c);
  const AttentionConfig cfg{{c.heads, c.kv_heads, c.head_dim, c.dtype, c.mask, 0.0f}, c.threads, c.isa, std::nullopt};
  BlockAttention attn(cfg);
  OnlineSoftmaxState st(c.b, c.heads, c.head_dim);
  const auto pos = Positions::contiguous(0, c.b);
  FoldStats fs;
  const double t_kernel = cli::median_seconds([&] {
    st.reset();
    fs = attn.fold(in.qp(c.dtype), pos, in.kp(c.dtype), in.vp(c.dtype), pos, st);
  });
  DenseMatmuls mm(c, in);
  const double full_flops = 4.0 * static_cast<double>(c.b * c.b * c.heads * c.head_dim);
  const double t_roof = roofline_seconds(c, mm);
  const double t_naive = with_naive ? naive_seconds(c, mm) : 0.0;
  const double gflops = fs.useful_flops / t_kernel / 1e9;
  const double roof = full_flops / t_roof / 1e9;
  const double naive = with_naive ? fs.useful_flops / t_naive / 1e9 : 0.0;
  cli::JsonObject o;
  o.add("bench", "kernel");
  bench::add_machine(o, c.dtype, attn.isa());
  o.add("dtype", to_string(c.dtype)).add("b", c.b).add("heads", c.heads).add("kv_heads", c.kv_heads);
  o.add("head_dim", c.head_dim).add("mask", to_string(c.mask)).add("threads", c.threads);
  o.add("seconds", t_kernel).add("gflops", gflops).add("roofline_gflops", roof).add("roofline_seconds", t_roof);
  o.add("efficiency", gflops / roof).add("naive_gflops", naive).add("naive_seconds", t_naive);
  o.add("speedup_vs_naive", with_naive ? t_naive / t_kernel : 0.0);
  o.add("tiles_computed", fs.tiles_computed).add("tiles_skipped", fs.tiles_skipped).add("command", command);
  std::printf("%s\n", o.str().c_str());
  std::fflush(stdout);
}

}  // namespace

int ringattn::cli::bench_kernel_main(const std::vector<std::string>& argv) {
  Args a("bench kernel", "Times the block-attention kernel (one query block against one key block of b tokens)\n"
                         "against a bare oneDNN matmul roofline and a naive materialise-softmax-multiply\n"
                         "implementation, in the same run. Prints one JSON object per line.");
  a.option("b", "LIST", "tokens per block", "128,256,512,1024,2048,4096")
      .option("heads", "N", "query heads", "8")
      .option("kv-heads", "N", "key/value heads", "8")
      .option("head-dim", "N", "head dimension", "128")
      .option("dtype", "LIST", "fp32, bf16 or both", "fp32,bf16")
      .option("mask", "LIST", "none, causal or both", "none,causal")
      .option("threads", "LIST", "OpenMP threads (0: all cores)", "1,2")
      .option("isa", "NAME", "force an ISA path (" + isa_names() + ")")
      .flag("no-naive", "skip the naive baseline")
      .flag("backward", "time the backward kernel instead (useful FLOPs 2.5x the forward's) against its five\n"
                        "matmuls as bare dense oneDNN ones");
  if (!a.parse(argv)) return 0;
  std::vector<DType> dtypes;
  for (const auto& d : split_commas(a.str("dtype"))) dtypes.push_back(parse_dtype(d));
  std::vector<Mask> masks;
  if (a.str("mask").find("none") != std::string::npos) masks.push_back(Mask::none());
  if (a.str("mask").find("causal") != std::string::npos) masks.push_back(Mask::causal());
  if (dtypes.empty()) throw InvalidArgument("bench kernel: --dtype must name fp32 and/or bf16, got '" + a.str("dtype") + "'");
  if (masks.empty()) throw InvalidArgument("bench kernel: --mask must name none and/or causal, got '" + a.str("mask") + "'");
  std::optional<Isa> isa;
  if (auto s = a.maybe("isa")) isa = parse_isa(*s);
  const auto bs = parse_int_list(a.str("b"), "--b");
  std::vector<int> threads;
  for (const std::string& t : split_commas(a.str("threads"))) threads.push_back(parse_integer_as(t, "--threads", 0, kMaxThreads));
  for (auto b : bs)
    if (b < 1) throw InvalidArgument("bench kernel: --b values must be >= 1, got " + std::to_string(b));
  for (auto& t : threads) {
    if (t == 0) t = omp_get_num_procs();  // all cores, recorded as the number it was
  }
  const std::string command = bench::shell_command("bench kernel", argv);
  const std::size_t total = bs.size() * dtypes.size() * masks.size() * threads.size();
  std::size_t done = 0;
  for (auto t : threads)
    for (auto dt : dtypes)
      for (const auto& mask : masks)
        for (auto b : bs) {
          cli::logger("bench")->info("[{}/{}] b={} {} {} threads={}", ++done, total, b, to_string(dt), to_string(mask), t);
          const Case c{b, a.int64("heads"), a.int64("kv-heads"), a.int64("head-dim"), dt, mask, t, isa};
          if (a.has("backward"))
            run_backward_case(c, command);
          else
            run_case(c, !a.has("no-naive"), command);
        }
  return 0;
}
