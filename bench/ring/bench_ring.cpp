// `ringattn bench ring` — the ring forward pass on real node processes over loopback TCP
// (run::run_ring, exactly what `ringattn run` does), against the same attention in one
// process with as many threads (single_process_baseline.hpp), in the same run.
//
// Inputs are generated once per head configuration, written as .npy into a scratch
// directory and reused by every repetition, ring size, layout, mask and dtype. Every
// repetition starts fresh node processes; the first one is a warm-up (page cache,
// library loading) and is not counted.
//
// What the fields mean (one JSON object per line on stdout, progress on stderr):
//   seconds          median over repetitions of the slowest node's forward pass
//                    (`total_seconds` of the node: ring steps, kernels, transfers; not
//                    process start-up, file reading, connecting or writing O)
//   gflops           useful FLOPs / seconds, useful FLOPs = 4 N^2 H D, half for causal
//                    (the convention of DESIGN.md: masked work never counts)
//   seconds_all, gflops_best
//                    every timed repetition (sorted) and the rate of the fastest: on a
//                    shared machine the spread shows how much other load interfered
//   per_node_*       per rank, from the median repetition. compute_max_over_mean is the
//                    load balance as timed; flops_max_over_mean the same from the useful
//                    FLOPs each node did, which stays exact when P nodes share fewer cores
//   transport_gbps   GB/s (1e9 bytes/s): K/V payload a node sent during its forward pass
//                    divided by that pass's duration, averaged over the nodes. Transfers
//                    overlap the kernels, so this is the rate the ring *needed* from the
//                    link, not the link's capacity (`bench transport` measures that);
//                    per_node_wait_seconds is the part of the pass the link was exposed.
//   wall_seconds     median `run` wall time: spawning, reading shards, connecting, the
//                    pass, writing and assembling O
//   max_rss_mib_per_node / rss_model_mib_per_node
//                    each node's peak resident set (its own VmHWM) and the
//                    per-node data it must hold: its Q, K, V (input dtype) and O (fp32)
//                    shards plus two K/V transfer buffers sized for the largest shard.
//   baseline_single_process_seconds
//                    median of the single-process fold, timed alternately with the ring
//   parallel_efficiency
//                    median over repetitions of baseline / ring time, pairing each ring
//                    run with the baseline run just before it
//   command          the command line that made the row, quoted for a POSIX shell
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../common/machine.hpp"
#include "../common/shell_command.hpp"
#include "single_process_baseline.hpp"
#include "ringattn/split.hpp"
#include "ringattn/error.hpp"
#include "../../src/cli/log.hpp"
#include "../../src/cli/args.hpp"
#include "../../src/cli/json_object.hpp"
#include "../../src/io/npy_writer.hpp"
#include "../../src/node/job.hpp"
#include "../../src/run/coordinator.hpp"

namespace ringattn::cli {
int bench_ring_main(const std::vector<std::string>& argv);
}

namespace {

using namespace ringattn;
namespace fs = std::filesystem;


// A scratch directory for the inputs and outputs, removed at exit unless the user chose it.
struct ScratchDir {
  std::string path;
  bool owned = false;
  explicit ScratchDir(const std::optional<std::string>& chosen) {
    if (chosen) {
      path = *chosen;
      fs::create_directories(path);
      return;
    }
    std::string tmpl = (fs::temp_directory_path() / "ringattn-bench-ring-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw FileError("bench ring: cannot create a scratch directory under " + tmpl);
    path = tmpl;
    owned = true;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (owned) fs::remove_all(path, ec);
  }
};

struct Sizes {
  std::int64_t seq, heads, kv_heads, head_dim;
};

bench::DenseInputs write_inputs(const Sizes& s, const std::string& dir) {
  bench::DenseInputs in;
  in.tokens = s.seq;
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto make = [&](std::vector<float>& x, std::int64_t heads, const char* name) {
    x.resize(static_cast<std::size_t>(s.seq * heads * s.head_dim));
    for (auto& e : x) e = nd(rng);
    io::write_npy_atomic(dir + "/" + name, std::vector<std::int64_t>{s.seq, heads, s.head_dim}, x);
  };
  make(in.q, s.heads, "q.npy");
  make(in.k, s.kv_heads, "k.npy");
  make(in.v, s.kv_heads, "v.npy");
  return in;
}

// Bytes a node must hold: Q, K, V shards (input dtype), O (fp32) and two K/V buffers.
double rss_model_bytes(const node::JobSpec& job, std::int64_t rows) {
  const auto& c = job.attention;
  const double s = static_cast<double>(dtype_size(c.dtype));
  const double most = static_cast<double>(node::max_job_rows(job));
  const double r = static_cast<double>(rows);
  return r * static_cast<double>(c.heads * c.head_dim) * (s + 4) + 2 * r * static_cast<double>(c.kv_heads * c.head_dim) * s +
         2 * 2 * most * static_cast<double>(c.kv_heads * c.head_dim) * s;
}

struct Params {
  std::vector<std::int64_t> nodes;
  std::vector<std::string> layouts, masks, dtypes;
  int threads = 1, reps = 3;
  double timeout = 300;
  bool baseline = true;
  std::string log_level;  // for the nodes
  std::string command;    // as recorded in every row
};

double median(std::vector<double> v) {  // the lower middle for an even count
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

// reps: the timed ring runs; baseline: the single-process time taken just before each.
void print_row(const node::JobSpec& job, const Sizes& sz, const std::vector<run::RunResult>& reps,
               const std::vector<double>& baseline, int baseline_threads, const std::string& command) {
  std::vector<std::size_t> order(reps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return reps[a].ring_seconds < reps[b].ring_seconds; });
  const run::RunResult& med = reps[order[(order.size() - 1) / 2]];
  std::vector<double> walls;
  for (const auto& r : reps) walls.push_back(r.wall_seconds);
  std::sort(walls.begin(), walls.end());
  const double seconds = med.ring_seconds;
  std::vector<double> all;  // every repetition, fastest first: contention shows as a spread
  for (auto i : order) all.push_back(reps[i].ring_seconds);
  const bool causal = job.attention.mask.kind == MaskKind::causal;
  const double flops = 4.0 * static_cast<double>(sz.seq) * static_cast<double>(sz.seq) *
                       static_cast<double>(sz.heads * sz.head_dim) * (causal ? 0.5 : 1.0);
  std::vector<double> compute, wait, total, rss_mib, model_mib, node_flops;
  std::vector<std::int64_t> bytes, payload;
  double rate = 0, rss_ratio = 0;
  for (const auto& n : med.nodes) {
    compute.push_back(n.compute_seconds);
    node_flops.push_back(n.useful_flops);
    wait.push_back(n.wait_seconds);
    total.push_back(n.total_seconds);
    bytes.push_back(static_cast<std::int64_t>(n.bytes_sent));
    payload.push_back(static_cast<std::int64_t>(n.payload_bytes_sent));
    rate += static_cast<double>(n.payload_bytes_sent) / n.total_seconds / 1e9 / static_cast<double>(med.nodes.size());
    const double model = rss_model_bytes(job, n.rows);
    rss_mib.push_back(static_cast<double>(n.max_rss_kib) / 1024.0);
    model_mib.push_back(model / (1 << 20));
    rss_ratio = std::max(rss_ratio, static_cast<double>(n.max_rss_kib) * 1024.0 / model);
  }
  auto max_over_mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() || s == 0 ? 0.0 : *std::max_element(v.begin(), v.end()) / (s / static_cast<double>(v.size()));
  };
  cli::JsonObject o;
  o.add("bench", "ring");
  bench::add_machine(o, job.attention.dtype);
  o.add("nodes", job.nodes).add("layout", to_string(job.layout)).add("mask", to_string(job.attention.mask));
  o.add("seq", sz.seq).add("heads", sz.heads).add("kv_heads", sz.kv_heads).add("head_dim", sz.head_dim);
  o.add("dtype", to_string(job.attention.dtype)).add("threads_per_node", job.attention.threads);
  o.add("reps", reps.size()).add("seconds", seconds).add("gflops", flops / seconds / 1e9);
  o.add("seconds_all", all).add("gflops_best", flops / all.front() / 1e9);
  o.add("per_node_compute_seconds", compute).add("per_node_wait_seconds", wait).add("per_node_total_seconds", total);
  o.add("compute_max_over_mean", max_over_mean(compute)).add("per_node_useful_flops", node_flops);
  o.add("flops_max_over_mean", max_over_mean(node_flops));
  o.add("bytes_sent_per_node", bytes).add("payload_bytes_per_node", payload).add("transport_gbps", rate);
  o.add("wall_seconds", walls[(walls.size() - 1) / 2]);
  o.add("max_rss_mib_per_node", rss_mib).add("rss_model_mib_per_node", model_mib).add("rss_over_model", rss_ratio);
  if (!baseline.empty()) {
    std::vector<double> ratio;  // pairwise: a slow phase of the machine cancels out
    for (std::size_t i = 0; i < reps.size(); ++i) ratio.push_back(baseline[i] / reps[i].ring_seconds);
    o.add("baseline_single_process_seconds", median(baseline)).add("baseline_seconds_all", baseline);
    o.add("baseline_threads", baseline_threads).add("parallel_efficiency", median(ratio));
  }
  o.add("command", command);
  std::printf("%s\n", o.str().c_str());
  std::fflush(stdout);
}

}  // namespace

int ringattn::cli::bench_ring_main(const std::vector<std::string>& argv) {
  Args a("bench ring", "Times the ring forward pass on P node processes over loopback TCP against the same\n"
                       "attention in one process with P x threads threads. Prints one JSON object per line\n"
                       "(fields explained at the top of bench/ring/bench_ring.cpp); progress on stderr.");
  a.option("nodes", "LIST", "ring sizes", "2")
      .option("layout", "LIST", "contiguous, zigzag, striped", "zigzag")
      .option("mask", "LIST", "none, causal", "none,causal")
      .option("seq", "N", "tokens", "16384")
      .option("heads", "N", "query heads", "8")
      .option("kv-heads", "LIST", "key/value heads", "8,2")
      .option("head-dim", "N", "head dimension", "128")
      .option("dtype", "LIST", "fp32, bf16", "fp32,bf16")
      .option("threads", "T", "OpenMP threads per node (0: all cores)", "1")
      .option("reps", "N", "timed repetitions after one warm-up (the median is reported)", "3")
      .option("timeout", "SEC", "the ring's network deadline (generous: folds can be long)", "300")
      .option("work-dir", "DIR", "where to write inputs and outputs (default: a temporary directory)")
      .flag("no-baseline", "skip the single-process baseline");
  if (!a.parse(argv)) return 0;
  Params p;
  p.nodes = parse_int_list(a.str("nodes"), "--nodes");
  p.layouts = split_commas(a.str("layout"));
  p.masks = split_commas(a.str("mask"));
  p.dtypes = split_commas(a.str("dtype"));
  p.threads = a.integer("threads", 0, kMaxThreads);  // 0: all cores
  p.reps = a.integer("reps", 1, 1 << 30);
  p.timeout = a.seconds("timeout", 0.001, 86400);
  p.baseline = !a.has("no-baseline");
  const Sizes base{a.int64("seq"), a.int64("heads"), 0, a.int64("head-dim")};
  // 0 is all cores: each node's own, and P times as many for the one-process baseline,
  // recorded as the number it was.
  if (p.threads == 0) p.threads = omp_get_num_procs();
  p.log_level = a.log_level().value_or("");
  p.command = bench::shell_command("bench ring", argv);
  for (const auto& m : p.masks)
    if (m != "none" && m != "causal") throw InvalidArgument("bench ring: --mask takes none and/or causal, got '" + m + "'");
  for (const auto& l : p.layouts) parse_layout(l);  // refuse typos before any work
  for (const auto& d : p.dtypes) parse_dtype(d);

  ScratchDir dir(a.maybe("work-dir"));
  const auto kvs = parse_int_list(a.str("kv-heads"), "--kv-heads");
  const std::size_t total = kvs.size() * p.dtypes.size() * p.masks.size() * p.nodes.size() * p.layouts.size();
  std::size_t done = 0;
  for (const auto kv : kvs) {
    Sizes sz = base;
    sz.kv_heads = kv;
    cli::logger("bench")->info("writing inputs N={} H={} KV={} D={} to {}", sz.seq, sz.heads, kv, sz.head_dim, dir.path);
    const bench::DenseInputs inputs = write_inputs(sz, dir.path);
    for (const auto& dt : p.dtypes)
      for (const auto& m : p.masks)
        for (const auto nodes : p.nodes)
          for (const auto& layout : p.layouts) {
            node::JobSpec job;
            job.q_path = dir.path + "/q.npy";
            job.k_path = dir.path + "/k.npy";
            job.v_path = dir.path + "/v.npy";
            job.nodes = static_cast<int>(nodes);
            job.layout = parse_layout(layout);
            job.attention.dtype = parse_dtype(dt);
            job.attention.mask = m == "causal" ? Mask::causal() : Mask::none();
            job.attention.threads = p.threads;
            job.timeout_seconds = p.timeout;
            job.log_level = p.log_level;
            node::inspect_inputs(job);
            ++done;
            const int bthreads = static_cast<int>(nodes) * p.threads;
            std::optional<bench::SingleProcessBaseline> baseline;
            if (p.baseline) {
              AttentionConfig cfg = job.attention;
              cfg.threads = bthreads;
              baseline.emplace(cfg, inputs);
            }
            run::RunOptions opts;
            opts.out_path = dir.path + "/o.npy";
            opts.quiet = true;
            std::vector<run::RunResult> results;
            std::vector<double> base_s;
            for (int r = 0; r <= p.reps; ++r) {  // r = 0 warms both up and is not counted
              const double b = baseline ? baseline->run_once() : 0.0;
              auto res = run::run_ring(job, opts);
              cli::logger("bench")->info("[{}/{}] P={} {} {} {} kv={} {} {}/{}: ring {:.3f} s (wall {:.3f} s){}", done, total,
                                    nodes, layout, m, dt, kv, r == 0 ? "warm-up" : "rep", r, p.reps, res.ring_seconds,
                                    res.wall_seconds,
                                    baseline ? fmt::format(", one process x {} threads {:.3f} s", bthreads, b) : "");
              if (r == 0) continue;
              results.push_back(std::move(res));
              if (baseline) base_s.push_back(b);
            }
            print_row(job, sz, results, base_s, bthreads, p.command);
          }
  }
  return 0;
}
