// `ringattn run` and `ringattn verify`: the ring on real processes, from .npy files or
// from generated inputs checked against dense float64 attention.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ringattn/split.hpp"
#include "../oracle/random_inputs.hpp"
#include "../oracle/reference.hpp"
#include "ringattn/error.hpp"
#include "ringattn/packing.hpp"
#include "../cli/json_object.hpp"
#include "../cli/json_on_failure.hpp"
#include "../io/npy_reader.hpp"
#include "../io/npy_writer.hpp"
#include "../node/job.hpp"
#include "coordinator.hpp"

namespace ringattn::cli {
int run_main(const std::vector<std::string>& argv);
int verify_main(const std::vector<std::string>& argv);
}

namespace ringattn::run {
namespace {

struct Totals {
  double flops = 0, max_compute = 0, sum_compute = 0;
  explicit Totals(const RunResult& r) {
    for (const auto& n : r.nodes) {
      flops += n.useful_flops;
      max_compute = std::max(max_compute, n.compute_seconds);
      sum_compute += n.compute_seconds;
    }
  }
  double compute_max_over_mean(std::size_t nodes) const {
    return sum_compute > 0 ? max_compute / (sum_compute / static_cast<double>(nodes)) : 0.0;
  }
};

// "zigzag layout", or "packed: 3 documents" for a packed batch.
std::string layout_text(const node::JobSpec& job) {
  const std::string decode =
      job.decode_steps > 0 ? ", the last " + std::to_string(job.decode_steps) + " tokens of each decoded" : "";
  if (job.cu_seqlens.empty())
    return job.decode_steps > 0 ? "one document" + decode : std::string(to_string(job.layout)) + " layout";
  return "packed: " + std::to_string(job.cu_seqlens.size() - 1) + " documents" + decode;
}

void print_summary(const node::JobSpec& job, const RunResult& r) {
  const Totals t(r);
  std::printf("ring: %d nodes, %s, %s mask, %lld tokens, heads %lld/%lld, head_dim %lld, %s\n", job.nodes,
              layout_text(job).c_str(), to_string(job.attention.mask).c_str(),
              static_cast<long long>(job.tokens), static_cast<long long>(job.attention.heads),
              static_cast<long long>(job.attention.kv_heads), static_cast<long long>(job.attention.head_dim),
              std::string(to_string(job.attention.dtype)).c_str());
  std::printf("  forward %.3f s (slowest node), %.1f GFLOP/s useful; wall %.3f s with process start-up\n", r.ring_seconds,
              t.flops / r.ring_seconds / 1e9, r.wall_seconds);
  std::printf("  per-node compute s:");
  for (const auto& n : r.nodes) std::printf(" %.3f", n.compute_seconds);
  std::printf("  (max/mean %.2f)\n", t.compute_max_over_mean(r.nodes.size()));
}

constexpr const char* kJsonHelp =
    "--json prints {\"ok\", \"command\", the job (nodes, layout (\"packed\" with --cu-seqlens), documents (0 unless\n"
    "packed), decode_steps, mask, dtype, tokens, heads, kv_heads, head_dim,\n"
    "threads_per_node), ring_seconds, wall_seconds, useful_flops, gflops, compute_max_over_mean, per_node: [{rank,\n"
    "rows, total/compute/wait_seconds, useful_flops, gflops, bytes_sent, payload_bytes_sent, io_cpu_seconds,\n"
    "steps_skipped, max_rss_kib}]}; a failed command prints {\"ok\": false, \"command\", \"error\"}.";

// The --json object of a finished ring: the job, the times and rates, per-node stats.
cli::JsonObject result_json(const char* command, bool ok, const node::JobSpec& job, const RunResult& r) {
  const Totals t(r);
  std::vector<cli::JsonObject> nodes;
  for (const auto& n : r.nodes) {
    cli::JsonObject o;
    o.add("rank", n.rank)
        .add("rows", n.rows)
        .add("total_seconds", n.total_seconds)
        .add("compute_seconds", n.compute_seconds)
        .add("wait_seconds", n.wait_seconds)
        .add("useful_flops", n.useful_flops)
        .add("gflops", n.useful_flops / n.total_seconds / 1e9)
        .add("bytes_sent", static_cast<std::uint64_t>(n.bytes_sent))
        .add("payload_bytes_sent", static_cast<std::uint64_t>(n.payload_bytes_sent))
        .add("io_cpu_seconds", n.io_cpu_seconds)
        .add("steps_skipped", n.steps_skipped)
        .add("max_rss_kib", n.max_rss_kib);
    nodes.push_back(std::move(o));
  }
  cli::JsonObject j;
  j.add("ok", ok)
      .add("command", command)
      .add("nodes", job.nodes)
      .add("layout", job.cu_seqlens.empty() && job.decode_steps == 0 ? std::string(to_string(job.layout)) : std::string("packed"))
      .add("documents", static_cast<std::int64_t>(job.cu_seqlens.empty() ? 0 : job.cu_seqlens.size() - 1))
      .add("decode_steps", job.decode_steps)
      .add("mask", to_string(job.attention.mask))
      .add("dtype", to_string(job.attention.dtype))
      .add("tokens", job.tokens)
      .add("heads", job.attention.heads)
      .add("kv_heads", job.attention.kv_heads)
      .add("head_dim", job.attention.head_dim)
      .add("threads_per_node", job.attention.threads)
      .add("ring_seconds", r.ring_seconds)
      .add("wall_seconds", r.wall_seconds)
      .add("useful_flops", t.flops)
      .add("gflops", t.flops / r.ring_seconds / 1e9)
      .add("compute_max_over_mean", t.compute_max_over_mean(r.nodes.size()))
      .add("per_node", nodes);
  return j;
}

void declare_run_options(cli::Args& a) {
  a.option("hosts", "LIST", "host:port per rank (default: loopback, free ports)")
      .option("launch", "PREFIX", "command prefix per node, {rank} substituted (e.g. 'ssh host{rank}', 'ip netns exec ra{rank}')")
      .flag("tls", "encrypt the ring's connections (TLS 1.3 keyed by the job's token)")
      .flag("json", "print one JSON object on stdout and nothing else (also on failure: \"ok\": false)");
}

RunOptions read_run_options(const cli::Args& a) {
  RunOptions o;
  if (auto h = a.maybe("hosts")) o.hosts = split_commas(*h);
  o.launch_prefix = a.maybe("launch").value_or("");
  o.tls = a.has("tls");
  o.quiet = a.quiet();  // the nodes run at --log-level error then; nothing of theirs to forward
  return o;
}

// verify's work directory: --work-dir, kept, else a temporary one removed at the end.
struct WorkDir {
  std::string path;
  bool remove = false;
  explicit WorkDir(const std::optional<std::string>& given) {
    namespace fs = std::filesystem;
    if (given) {
      path = *given;
      fs::create_directories(path);
      return;
    }
    std::string tmpl = (fs::temp_directory_path() / "ringattn-verify-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw FileError("verify: cannot create a temporary directory");
    path = tmpl;
    remove = true;
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  ~WorkDir() {
    std::error_code ec;
    if (remove) std::filesystem::remove_all(path, ec);
  }
};

// --docs: a packed batch of documents of these lengths, through a --cu-seqlens file like
// any run's (the nodes read it).
void write_docs(const std::string& docs, const std::string& dir, node::JobSpec& job) {
  if (!job.cu_seqlens.empty()) throw InvalidArgument("verify: give --docs or --cu-seqlens, not both");
  std::string text = "0";
  std::int64_t total = 0;
  for (const auto& len : split_commas(docs)) {
    const std::int64_t l = cli::parse_count(len, "--docs");
    if (l < 1) throw InvalidArgument("--docs: every document needs at least one token, got '" + len + "'");
    total += l;
    text.push_back(',');
    text.append(std::to_string(total));
  }
  job.cu_seqlens_path = dir + "/cu_seqlens.txt";
  std::ofstream(job.cu_seqlens_path) << text << "\n";
  job.cu_seqlens = node::read_cu_seqlens(job.cu_seqlens_path);
}

// The largest |O - dense| and |lse - dense| of a run against float64 dense attention (a NaN
// difference is the worst, not skipped as by fmax).
struct Errors {
  double o = 0, lse = 0;
};
Errors against_dense(const node::JobSpec& job, std::int64_t n, std::int64_t h, std::int64_t kvh, std::int64_t d,
                     const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                     const std::vector<float>& o, const std::vector<float>& lse) {
  std::vector<double> ref(o.size()), ref_lse(lse.size());
  const auto all = Positions::contiguous(0, n);
  const auto ids = job.cu_seqlens.empty() ? std::vector<std::int32_t>{} : document_ids(job.cu_seqlens);
  oracle::dense_attention_f64({h, kvh, d, job.attention.mask, 0.0}, q.data(), all, k.data(), v.data(), all, ref.data(),
                               ref_lse.data(), ids.empty() ? nullptr : ids.data(), ids.empty() ? nullptr : ids.data());
  Errors e;
  auto worst = [](double& w, double x) {
    if (!(x <= w)) w = x;
  };
  for (std::size_t i = 0; i < o.size(); ++i) worst(e.o, std::fabs(o[i] - ref[i]));
  for (std::size_t i = 0; i < lse.size(); ++i)
    if (!(std::isinf(ref_lse[i]) && std::isinf(lse[i]))) worst(e.lse, std::fabs(lse[i] - ref_lse[i]));
  return e;
}

// verify after its options are declared: generate, run, compare with float64 dense attention.
int verify(cli::Args& a, const std::vector<std::string>& argv) {
  if (!a.parse(argv)) return 0;
  node::JobSpec job;
  node::read_job_options(a, job);
  std::int64_t n = a.int64("seq");
  const std::int64_t h = a.int64("heads"), kvh = a.int64("kv-heads"), d = a.int64("head-dim");
  if (n < 1 || h < 1 || kvh < 1 || d < 1) throw InvalidArgument("verify: --seq, --heads, --kv-heads, --head-dim must be >= 1");
  const WorkDir work(a.maybe("work-dir"));
  const std::string& dir = work.path;
  if (auto docs = a.maybe("docs")) write_docs(*docs, dir, job);
  if (!job.cu_seqlens.empty()) n = job.cu_seqlens.back();  // the documents decide the length

  const auto seed = a.integer<unsigned>("seed", 0, UINT32_MAX);
  auto make = [&](std::int64_t heads, unsigned salt) {
    auto x = oracle::random_normal(static_cast<std::size_t>(n * heads * d), seed * 3 + salt);
    if (job.attention.dtype == DType::bf16) oracle::round_to_bf16(x);  // the reference sees what the ring sees
    return x;
  };
  const auto q = make(h, 0), k = make(kvh, 1), v = make(kvh, 2);
  job.q_path = dir + "/q.npy";
  job.k_path = dir + "/k.npy";
  job.v_path = dir + "/v.npy";
  io::write_npy_atomic(job.q_path, std::vector<std::int64_t>{n, h, d}, q);
  io::write_npy_atomic(job.k_path, std::vector<std::int64_t>{n, kvh, d}, k);
  io::write_npy_atomic(job.v_path, std::vector<std::int64_t>{n, kvh, d}, v);
  node::inspect_inputs(job);
  auto opts = read_run_options(a);
  opts.out_path = dir + "/o.npy";
  opts.lse_path = dir + "/lse.npy";
  const auto r = run_ring(job, opts);

  const Errors err = against_dense(job, n, h, kvh, d, q, k, v, io::read_npy(opts.out_path).data, io::read_npy(opts.lse_path).data);
  const bool bf16 = job.attention.dtype == DType::bf16;
  const double tol = bf16 ? 1e-2 : 2e-5, tol_lse = 2e-5;
  const bool ok = err.o <= tol && err.lse <= tol_lse;  // false for NaN too
  // "exact" is a claim about fp32 only; bf16 inputs are rounded, so its result is close, not exact.
  const char* verdict = !ok ? "MISMATCH" : bf16 ? "within bf16 tolerance" : "exact";
  if (a.has("json")) {
    auto j = result_json("verify", ok, job, r);
    j.add("max_abs_error_o", err.o)
        .add("max_abs_error_lse", err.lse)
        .add("tolerance_o", tol)
        .add("tolerance_lse", tol_lse)
        .add("verdict", verdict);
    std::printf("%s\n", j.str().c_str());
    return ok ? 0 : 1;
  }
  print_summary(job, r);
  std::printf("  max |O - dense| = %.3g, max |lse - dense| = %.3g (tolerance %.0e / %.0e) -> %s\n", err.o, err.lse, tol,
              tol_lse, verdict);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace ringattn::run

int ringattn::cli::run_main(const std::vector<std::string>& argv) {
  Args a("run", "Runs exact attention on a ring of P node processes and writes O (and lse) in the original\n"
                "token order. Inputs and outputs are float32 .npy: Q and O [tokens, heads, head_dim], K and V\n"
                "[tokens, kv_heads, head_dim], lse [tokens, heads]. A failed run leaves no output file.");
  node::declare_job_options(a, true);
  a.option("out", "FILE", "output O (.npy)").option("lse", "FILE", "output lse (.npy)");
  run::declare_run_options(a);
  a.epilogue(run::kJsonHelp);
  return cli::json_on_failure(argv, "run", [&] {
    if (!a.parse(argv)) return 0;
    node::JobSpec job;
    job.q_path = a.str("q");
    job.k_path = a.str("k");
    job.v_path = a.str("v");
    node::read_job_options(a, job);
    node::inspect_inputs(job);
    auto opts = run::read_run_options(a);
    opts.out_path = a.str("out");
    opts.lse_path = a.maybe("lse").value_or("");
    const auto r = run::run_ring(job, opts);
    if (a.has("json")) {
      auto j = run::result_json("run", true, job, r);
      j.add("out", opts.out_path).add("lse", opts.lse_path);
      std::printf("%s\n", j.str().c_str());
      return 0;
    }
    run::print_summary(job, r);
    std::printf("  wrote %s%s%s\n", opts.out_path.c_str(), opts.lse_path.empty() ? "" : " and ", opts.lse_path.c_str());
    return 0;
  });
}

int ringattn::cli::verify_main(const std::vector<std::string>& argv) {
  Args a("verify", "Generates random inputs, runs the ring on P processes and the single-process float64\n"
                   "reference, and prints the max abs error and the time. Exit 1 if the error exceeds the\n"
                   "tolerance (fp32 2e-5, bf16 1e-2 on O; 2e-5 on lse, on unit-scale inputs): \"exact\" for\n"
                   "fp32, \"within bf16 tolerance\" for bf16, else \"MISMATCH\".");
  node::declare_job_options(a, false);
  a.option("seq", "N", "tokens", "4096")
      .option("docs", "LENGTHS", "a packed batch of documents of these lengths (e.g. 100,37,900; replaces --seq), "
                                 "checked against dense attention within each document")
      .option("heads", "N", "query heads", "8")
      .option("kv-heads", "N", "key/value heads", "2")
      .option("head-dim", "N", "head dimension", "128")
      .option("seed", "N", "random seed", "1")
      .option("work-dir", "DIR", "where to put the generated inputs (default: a fresh temporary directory)");
  run::declare_run_options(a);
  a.epilogue(std::string(run::kJsonHelp) + "\nverify adds max_abs_error_o/_lse, tolerance_o/_lse and verdict; \"ok\" is false on a mismatch.");
  return cli::json_on_failure(argv, "verify", [&] { return run::verify(a, argv); });
}
