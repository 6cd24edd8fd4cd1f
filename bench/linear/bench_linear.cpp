// `ringattn bench linear` — the model's weight matmul (ringattn::Linear) against two
// baselines measured in the same run, on the same weights and threads:
//   roof:    oneDNN's own matmul of the same shape, its weights reordered once into the
//            layout it prefers (format "any"), in the weights' dtype where oneDNN multiplies
//            it natively (bf16 on AVX512-BF16 / AMX: activations rounded to bf16 too), fp32
//            otherwise — the matmul engine at its best, as a prefill would use it;
//   stream:  one threaded pass reading the packed weight bytes and nothing else — what
//            memory allows a decode step that must read every weight once.
// One JSON object per line on stdout (the command that made it included); progress on
// stderr. Shapes default to one layer of a Llama-style model of dim 2048 (32/8 heads of
// 64, MLP 8192: issue 32's bench shape) and its classifier over a 512-token vocabulary.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../common/machine.hpp"
#include "../common/shell_command.hpp"
#include "../../src/cli/args.hpp"
#include "../../src/cli/json_object.hpp"
#include "../../src/cli/log.hpp"
#include "../../src/cli/timing.hpp"
#include "../../src/oracle/random_inputs.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/half.hpp"
#include "ringattn/linear.hpp"
#include "ringattn/split.hpp"

namespace ringattn::cli {
int bench_linear_main(const std::vector<std::string>& argv);
}

namespace {

using namespace ringattn;
using dnnl::memory;

bool quantized(DType d) { return d == DType::q8_0 || d == DType::q4_k || d == DType::q6_k; }

// Random GGUF blocks of q4_k or q6_k for [out, in] (small fp16 scales, every other byte
// random): what a file holds, for timing.
std::vector<std::uint8_t> random_blocks(DType d, std::int64_t out, std::int64_t in) {
  const std::size_t per = d == DType::q4_k ? 144 : 210, n = static_cast<std::size_t>(out * in / 256);
  std::vector<std::uint8_t> b(n * per);
  std::uint64_t r = 88172645463325252ull;
  for (auto& v : b) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    v = static_cast<std::uint8_t>(r);
  }
  const std::uint16_t small = to_f16(1e-3f);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint8_t* blk = b.data() + i * per;
    if (d == DType::q4_k) {
      std::memcpy(blk, &small, 2);
      std::memcpy(blk + 2, &small, 2);
    } else {
      std::memcpy(blk + 208, &small, 2);
    }
  }
  return b;
}

struct Shape {
  std::string name;
  std::int64_t out, in;
};

// oneDNN: y[rows, out] = x[rows, in] · W, W [in, out] reordered once into oneDNN's layout.
class OnednnWeights {
 public:
  OnednnWeights(std::int64_t rows, const Shape& s, const std::vector<float>& w_out_in, DType dt, int threads) {
    const int saved = omp_get_max_threads();  // oneDNN reads the OpenMP thread count at creation
    omp_set_num_threads(threads);
    // Block formats: oneDNN's int8 matmul (u8 activations, s8 weights, fp32 out): the
    // integer roof the integer block tiles are held against.
    const bool int8 = quantized(dt);
    const auto t = dt == DType::bf16 ? memory::data_type::bf16 : int8 ? memory::data_type::s8 : memory::data_type::f32;
    const memory::desc a({rows, s.in}, int8 ? memory::data_type::u8 : t, memory::format_tag::ab),
        b({s.in, s.out}, t, memory::format_tag::any),
        c({rows, s.out}, memory::data_type::f32, memory::format_tag::ab);
    try {
      pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), engine_);
      prim_ = dnnl::matmul(pd_);
    } catch (const dnnl::error& e) {
      omp_set_num_threads(saved);
      throw InvalidArgument("bench linear: oneDNN cannot create a " + std::string(to_string(dt)) + " matmul for " +
                            s.name + " here (" + e.what() + ")");
    }
    // W [out, in] row-major is W^T's [in, out] with strides (1, in): oneDNN's "ba".
    std::vector<float> wt(w_out_in);
    memory src(memory::desc({s.in, s.out}, memory::data_type::f32, memory::format_tag::ba), engine_, wt.data());
    weights_ = memory(pd_.weights_desc(), engine_);
    dnnl::reorder(src, weights_).execute(stream_, src, weights_);
    x_ = memory(pd_.src_desc(), engine_);
    y_ = memory(c, engine_);
    stream_.wait();
    omp_set_num_threads(saved);
  }
  void set_x(const std::vector<float>& x) {
    memory src(memory::desc(pd_.src_desc().dims(), memory::data_type::f32, memory::format_tag::ab), engine_,
               const_cast<float*>(x.data()));
    dnnl::reorder(src, x_).execute(stream_, src, x_);
    stream_.wait();
  }
  void run() {
    prim_.execute(stream_, {{DNNL_ARG_SRC, x_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, y_}});
    stream_.wait();
  }
  std::string impl() const { return pd_.impl_info_str(); }

 private:
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  memory weights_, x_, y_;
};

// Reads every packed byte once on `threads` threads: each thread its share as four
// interleaved streams (more misses in flight than one stream keeps: on the Zen 5 VM, 85 GB/s
// against 58 for one plain loop), eight 64-bit lanes each, XOR-folded to keep the loads alive.
std::uint64_t stream(std::span<const std::byte> bytes, int threads) {
  const auto* w = reinterpret_cast<const std::uint64_t*>(bytes.data());
  const std::size_t n = bytes.size() / 8;
  std::uint64_t acc = 0;
#pragma omp parallel num_threads(threads) reduction(+ : acc)
  {
    const auto t = static_cast<std::size_t>(omp_get_thread_num()), team = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t a = n * t / team, b = n * (t + 1) / team, len = (b - a) / 4 / 8 * 8;
    std::uint64_t lane[8] = {};
    for (std::size_t i = 0; i < len; i += 8)
      for (std::size_t q = 0; q < 4; ++q)
        for (int j = 0; j < 8; ++j) lane[j] ^= w[a + q * len + i + static_cast<std::size_t>(j)];
    for (std::size_t i = a + 4 * len; i < b; ++i) lane[0] ^= w[i];
    for (auto l : lane) acc += l;
  }
  return acc;
}

void run_case(const Shape& s, std::int64_t rows, DType dt, Activations acts, int threads, std::optional<Isa> isa,
              const std::string& command) {
  std::vector<float> w = oracle::random_normal(static_cast<std::size_t>(s.out * s.in), 7);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.in));
  for (float& v : w) v *= scale;
  std::vector<std::uint16_t> bits;
  if (dt == DType::bf16) bits = oracle::round_to_bf16(w);  // w now holds the rounded values
  if (dt == DType::f16)
    for (float& v : w) {
      bits.push_back(to_f16(v));
      v = from_f16(bits.back());
    }
  std::vector<std::uint8_t> blocks;
  if (dt == DType::q4_k || dt == DType::q6_k) blocks = random_blocks(dt, s.out, s.in);
  Linear lin = dt == DType::q8_0 ? Linear(DType::q8_0, s.in, {std::span<const float>(w)}, isa)
               : !blocks.empty() ? Linear(dt, s.out, s.in, blocks.data(), isa)
                                 : Linear(dt, s.out, s.in, dt != DType::f32 ? static_cast<const void*>(bits.data()) : w.data(), isa);
  lin.set_activations(acts);
  const std::vector<float> x = oracle::random_normal(static_cast<std::size_t>(rows * s.in), 8);
  std::vector<float> y(static_cast<std::size_t>(rows * s.out));
  const double t_linear = cli::median_seconds([&] { lin.apply(x.data(), rows, s.in, y.data(), s.out, false, threads); });

  const DType roof_dt = dt == DType::bf16 ? bf16_matmul_dtype() : quantized(dt) ? dt : DType::f32;
  OnednnWeights roof(rows, s, w, roof_dt, threads);
  roof.set_x(x);
  omp_set_num_threads(threads);
  const double t_roof = cli::median_seconds([&] { roof.run(); });
  volatile std::uint64_t sink = 0;
  const double t_stream = cli::median_seconds([&] { sink = sink + stream(lin.packed(), threads); });

  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(s.out) * static_cast<double>(s.in);
  const double bytes = static_cast<double>(lin.packed().size());
  cli::JsonObject o;
  o.add("bench", "linear");
  bench::add_machine(o, dt, lin.isa());
  o.add("kernel", lin.kernel()).add("shape", s.name).add("out", s.out).add("in", s.in).add("rows", rows);
  o.add("dtype", to_string(dt));
  if (quantized(dt)) o.add("activations", to_string(acts));
  o.add("threads", threads).add("seconds", t_linear).add("gflops", flops / t_linear / 1e9);
  o.add("roof_impl", roof.impl()).add("roof_dtype", quantized(dt) ? "int8" : to_string(roof_dt)).add("roof_seconds", t_roof);
  o.add("roof_gflops", flops / t_roof / 1e9).add("of_roof", t_roof / t_linear);
  o.add("weight_bytes", bytes).add("gbytes_per_s", bytes / t_linear / 1e9);
  o.add("stream_seconds", t_stream).add("stream_gbytes_per_s", bytes / t_stream / 1e9).add("of_stream", t_stream / t_linear);
  o.add("command", command);
  std::printf("%s\n", o.str().c_str());
  std::fflush(stdout);
}

std::vector<Shape> parse_shapes(const std::string& list) {
  std::vector<Shape> out;
  for (const auto& item : split_commas(list)) {
    const auto a = item.find(':'), b = item.find(':', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos)
      throw InvalidArgument("bench linear: --shapes item '" + item + "' is not NAME:OUT:IN");
    const auto dims = cli::parse_int_list(item.substr(a + 1, b - a - 1) + "," + item.substr(b + 1), "--shapes " + item);
    if (dims.size() != 2 || dims[0] < 1 || dims[1] < 1)
      throw InvalidArgument("bench linear: --shapes item '" + item + "' needs OUT and IN >= 1");
    out.push_back({item.substr(0, a), dims[0], dims[1]});
  }
  return out;
}

}  // namespace

int ringattn::cli::bench_linear_main(const std::vector<std::string>& argv) {
  Args a("bench linear",
         "Times the model's weight matmul (ringattn::Linear: y = x W^T, W [out, in] packed in its dtype) against\n"
         "oneDNN's matmul of the same shape with its weights in oneDNN's preferred layout (the roof) and a\n"
         "threaded read of the packed weight bytes (the stream), in the same run. One JSON object per line.");
  a.option("shapes", "LIST", "NAME:OUT:IN,... (default: one dim-2048 Llama layer and a 512-token classifier)",
           "qkv:3072:2048,o:2048:2048,gate_up:16384:2048,down:2048:8192,head:512:2048")
      .option("rows", "LIST", "rows per call: 1 and a few are decode, hundreds prefill", "1,4,512")
      .option("dtype", "LIST", "the weights' dtypes: fp32, bf16, fp16 (its roof: oneDNN's fp32 matmul), q8_0, q4_k, q6_k", "fp32,bf16")
      .option("activations", "LIST", "block formats (q8_0, q4_k, q6_k; roof: oneDNN's int8 matmul): int8, fp32",
              "int8")
      .option("threads", "LIST", "OpenMP threads (0: all cores)", "0")
      .option("isa", "NAME", "force an ISA path (" + isa_names() + ")");
  if (!a.parse(argv)) return 0;
  const std::vector<Shape> shapes = parse_shapes(a.str("shapes"));
  std::vector<DType> dtypes;
  for (const auto& d : split_commas(a.str("dtype"))) dtypes.push_back(d == "q4_k" ? DType::q4_k : d == "q6_k" ? DType::q6_k : parse_weights_dtype(d));
  std::vector<Activations> acts;
  for (const auto& v : split_commas(a.str("activations"))) acts.push_back(parse_activations(v));
  const auto rows = cli::parse_int_list(a.str("rows"), "--rows");
  for (auto r : rows)
    if (r < 1 || r > (1 << 20)) throw InvalidArgument("bench linear: --rows values must be in [1, 2^20], got " + std::to_string(r));
  std::vector<int> threads;
  for (const std::string& t : split_commas(a.str("threads"))) threads.push_back(cli::parse_integer_as(t, "--threads", 0, kMaxThreads));
  for (auto& t : threads) {
    if (t == 0) t = omp_get_num_procs();  // all cores, recorded as the number it was
  }
  std::optional<Isa> isa;
  if (auto s = a.maybe("isa")) isa = parse_isa(*s);
  const std::string command = bench::shell_command("bench linear", argv);
  std::size_t total = 0, done = 0;
  for (auto dt : dtypes) total += quantized(dt) ? acts.size() : 1;
  total *= shapes.size() * rows.size() * threads.size();
  for (auto t : threads)
    for (auto dt : dtypes)
      for (std::size_t ai = 0; ai < (quantized(dt) ? acts.size() : 1); ++ai)
        for (auto r : rows)
          for (const auto& s : shapes) {
            const Activations act = quantized(dt) ? acts[ai] : Activations::int8;
            cli::logger("bench")->info("[{}/{}] {} [{}, {}] rows={} {} {} threads={}", ++done, total, s.name, s.out,
                                       s.in, r, to_string(dt), quantized(dt) ? to_string(act) : "", t);
            run_case(s, r, dt, act, static_cast<int>(t), isa, command);
          }
  return 0;
}
