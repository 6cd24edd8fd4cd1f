// `ringattn bench api` — the Ring as an embedding job uses it: P processes (started by
// the launcher `run` uses, meeting through its rendezvous) connect one Ring each and
// call forward() again and again on warm connections.
//
// Two measurements, one JSON object per line on stdout:
//   overhead  many small calls (default 256 rows per rank, 8 heads of 128, fp32): per
//             call, the slowest rank's wall time of forward() minus the slowest rank's
//             kernel time — what a call costs beyond the kernel (agreeing on the spec,
//             moving the blocks, waking threads). Median, p10, p90 over the calls, and
//             its two parts: waiting for the peer's block, and the call's own work.
//   layers    `--layers` consecutive calls of one shape (a 32-layer model): the first
//             call's useful GFLOP/s (it creates the kernel's primitives and the buffers)
//             against the median of the later ones, and each rank's resident set after
//             the first and after the last call (VmRSS, and the peak VmHWM).
// Useful FLOPs count visible (query, key) pairs only, as everywhere.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../common/machine.hpp"
#include "../common/shell_command.hpp"
#include "../../src/cli/stats.hpp"
#include "../../src/cli/log.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn/ring.hpp"
#include "../../src/cli/args.hpp"
#include "../../src/cli/json_object.hpp"
#include "../../infer/common/json.hpp"
#include "../../src/node/launcher_channel.hpp"
#include "../../src/node/report.hpp"
#include "../../src/run/launcher.hpp"
#include "../../src/run/local_rendezvous.hpp"

namespace ringattn::cli {
int bench_api_main(const std::vector<std::string>& argv);
}

namespace {

using namespace ringattn;
using cli::median;
using cli::percentile;

struct Plan {
  int nodes = 2;
  std::int64_t rows = 256;     // per rank, overhead calls
  std::int64_t heads = 8, kv_heads = 8, head_dim = 128;
  int calls = 200;             // overhead calls (after warm-up)
  std::int64_t layer_tokens = 16384;
  int layers = 32;
  DType dtype = DType::f32;
  int threads = 1;
  double timeout = 60;
  std::optional<std::string> log_level;  // passed to the members
  bool quiet = false;                    // members at error level, their stderr not forwarded
};

std::vector<std::string> plan_args(const Plan& p) {
  return {"--nodes", std::to_string(p.nodes), "--rows", std::to_string(p.rows), "--heads", std::to_string(p.heads),
          "--kv-heads", std::to_string(p.kv_heads), "--head-dim", std::to_string(p.head_dim), "--calls",
          std::to_string(p.calls), "--layer-tokens", std::to_string(p.layer_tokens), "--layers", std::to_string(p.layers),
          "--dtype", std::string(to_string(p.dtype)), "--threads", std::to_string(p.threads), "--timeout",
          std::to_string(p.timeout), "--log-level", p.quiet ? "error" : p.log_level.value_or("info")};
}

RingOptions ring_options(const Plan& p, int rank) {
  RingOptions o;
  o.rank = rank;
  o.world_size = p.nodes;
  o.threads = p.threads;
  o.timeout = p.timeout;
  o.connect_timeout = 60;
  o.limits.max_rows = std::max(p.rows, (p.layer_tokens + p.nodes - 1) / p.nodes + 1);
  o.limits.max_heads = p.heads;
  o.limits.max_kv_heads = p.kv_heads;
  o.limits.max_head_dim = p.head_dim;
  return o;
}

long status_kib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  const std::string want = std::string(field) + ": %ld kB";
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, want.c_str(), &kib) == 1) break;
  if (f) std::fclose(f);
  return kib;
}

std::vector<float> random_rows(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One member: overhead calls, then the layers; a CALL or LAYER line per call.
void member(const Plan& p, int rank, const std::string& master, std::uint64_t ring_id) {
  set_log_rank(rank);
  node::LauncherChannel launcher(rank);
  RingOptions o = ring_options(p, rank);
  o.ring_id = ring_id;
  o.master = master;
  o.master_is_external = true;
  o.token = checked_token(launcher.token(o.connect_timeout), "the launcher's pipe");
  Ring ring = Ring::connect(o);
  auto line = [&](const char* kind, int call, const ForwardStats& s) {
    node::emit_line(std::string(kind) + " " +
                    cli::JsonObject()
                        .add("rank", rank)
                        .add("call", call)
                        .add("seconds", s.seconds)
                        .add("compute_seconds", s.compute_seconds)
                        .add("wait_seconds", s.wait_seconds)
                        .add("useful_flops", s.useful_flops)
                        .add("rss_kib", static_cast<std::int64_t>(status_kib("VmRSS")))
                        .add("hwm_kib", static_cast<std::int64_t>(status_kib("VmHWM")))
                        .str());
  };
  {  // overhead: small calls, contiguous rows, no mask
    AttentionSpec spec{p.heads, p.kv_heads, p.head_dim, p.dtype, Mask::none(), 0};
    const auto q = random_rows(static_cast<std::size_t>(p.rows * p.heads * p.head_dim), 10 + rank);
    const auto kv = random_rows(static_cast<std::size_t>(p.rows * p.kv_heads * p.head_dim), 20 + rank);
    std::vector<std::int64_t> pos(static_cast<std::size_t>(p.rows));
    for (std::int64_t i = 0; i < p.rows; ++i) pos[static_cast<std::size_t>(i)] = rank * p.rows + i;
    std::vector<float> out(q.size()), lse(static_cast<std::size_t>(p.rows * p.heads));
    for (int c = 0; c < 10; ++c) ring.forward({spec, q, kv, kv, pos}, out, lse);  // warm-up
    for (int c = 0; c < p.calls; ++c) line("CALL", c, ring.forward({spec, q, kv, kv, pos}, out, lse));
  }
  {  // layers: one shape, causal zigzag over layer_tokens, a fresh kernel for it
    AttentionSpec spec{p.heads, p.kv_heads, p.head_dim, p.dtype, Mask::causal(), 0};
    const auto pos = shard_positions(Layout::zigzag, p.layer_tokens, p.nodes, rank).materialize();
    const std::size_t rows = pos.size();
    const auto q = random_rows(rows * static_cast<std::size_t>(p.heads * p.head_dim), 30 + rank);
    const auto k = random_rows(rows * static_cast<std::size_t>(p.kv_heads * p.head_dim), 40 + rank);
    const auto v = random_rows(rows * static_cast<std::size_t>(p.kv_heads * p.head_dim), 50 + rank);
    std::vector<float> out(q.size()), lse(rows * static_cast<std::size_t>(p.heads));
    for (int c = 0; c < p.layers; ++c) line("LAYER", c, ring.forward({spec, q, k, v, pos}, out, lse));
  }
  ring.close();
}

struct CallRow {
  int rank = 0, call = 0;
  double seconds = 0, compute = 0, wait = 0, flops = 0;
  long rss = 0, hwm = 0;
};

CallRow parse_call(const std::string& json) {
  const infer::Json j = infer::parse_json(json);
  auto num = [&](const char* k) { return infer::json_number(j, k).value_or(0.0); };
  return {static_cast<int>(num("rank")), static_cast<int>(num("call")), num("seconds"), num("compute_seconds"),
          num("wait_seconds"), num("useful_flops"), static_cast<long>(num("rss_kib")), static_cast<long>(num("hwm_kib"))};
}

int front(const Plan& p, const std::string& command) {
  const std::string token = generate_token();
  const std::uint64_t ring_id = new_ring_id();
  const auto rendezvous = run::serve_local_rendezvous(ring_options(p, 0), p.nodes, ring_id, token, 60);
  std::vector<CallRow> calls, layers;
  run::LaunchSpec ls;
  ls.ranks = p.nodes;
  ls.token = token;
  ls.timeout_seconds = p.timeout;
  ls.quiet = p.quiet;
  ls.expected = {"", ""};
  ls.arguments = [&](int r) {
    std::vector<std::string> a = {"bench", "api", "--member", std::to_string(r), "--master",
                                  "127.0.0.1:" + std::to_string(rendezvous->port()), "--ring-id", std::to_string(ring_id)};
    const auto pa = plan_args(p);
    a.insert(a.end(), pa.begin(), pa.end());
    return a;
  };
  ls.on_line = [&](int, const std::string& line) {
    if (line.rfind("CALL ", 0) == 0) calls.push_back(parse_call(line.substr(5)));
    else if (line.rfind("LAYER ", 0) == 0) layers.push_back(parse_call(line.substr(6)));
  };
  cli::logger("bench")->info("{} ranks: {} calls of {} rows per rank, then {} layers of {} tokens", p.nodes, p.calls, p.rows,
                        p.layers, p.layer_tokens);
  run::launch(ls);

  // Per call: the slowest rank's wall time and the slowest rank's kernel time.
  auto per_call = [&](const std::vector<CallRow>& rows, int n) {
    std::vector<double> wall(static_cast<std::size_t>(n), 0), kern(static_cast<std::size_t>(n), 0),
        flops(static_cast<std::size_t>(n), 0);
    for (const auto& r : rows) {
      const auto c = static_cast<std::size_t>(r.call);
      wall[c] = std::max(wall[c], r.seconds);
      kern[c] = std::max(kern[c], r.compute);
      flops[c] += r.flops;
    }
    return std::tuple{wall, kern, flops};
  };
  {
    auto [wall, kern, flops] = per_call(calls, p.calls);
    std::vector<double> overhead;
    for (std::size_t c = 0; c < wall.size(); ++c) overhead.push_back(wall[c] - kern[c]);
    // Split: time blocked on the peer's block (loopback transfer plus the peer being later
    // into the call) and the library's own work (checks, packing, finalize) on the worse rank.
    std::vector<double> waited(wall.size(), 0), own(wall.size(), 0);
    for (const auto& r : calls) {
      const auto c = static_cast<std::size_t>(r.call);
      waited[c] = std::max(waited[c], r.wait);
      own[c] = std::max(own[c], r.seconds - r.compute - r.wait);
    }
    std::printf("%s\n", bench::add_machine(cli::JsonObject().add("bench", "api"), p.dtype)
                            .add("measure", "overhead")
                            .add("nodes", p.nodes)
                            .add("rows_per_rank", p.rows)
                            .add("heads", p.heads)
                            .add("kv_heads", p.kv_heads)
                            .add("head_dim", p.head_dim)
                            .add("dtype", to_string(p.dtype))
                            .add("calls", p.calls)
                            .add("call_ms_median", 1e3 * cli::median(wall))
                            .add("kernel_ms_median", 1e3 * cli::median(kern))
                            .add("overhead_ms_median", 1e3 * cli::median(overhead))
                            .add("overhead_ms_p10", 1e3 * cli::percentile(overhead, 0.1))
                            .add("overhead_ms_p90", 1e3 * cli::percentile(overhead, 0.9))
                            .add("wait_ms_median", 1e3 * cli::median(waited))
                            .add("own_work_ms_median", 1e3 * cli::median(own))
                            .add("command", command)
                            .str()
                            .c_str());
  }
  {
    auto [wall, kern, flops] = per_call(layers, p.layers);
    std::vector<double> rate;
    for (std::size_t c = 0; c < wall.size(); ++c) rate.push_back(flops[c] / wall[c] / 1e9);
    const double first = rate.front();
    const double later = cli::median(std::vector<double>(rate.begin() + 1, rate.end()));
    long rss_first = 0, rss_last = 0, hwm_first = 0, hwm_last = 0;
    for (const auto& r : layers) {
      if (r.call == 0) rss_first = std::max(rss_first, r.rss), hwm_first = std::max(hwm_first, r.hwm);
      if (r.call == p.layers - 1) rss_last = std::max(rss_last, r.rss), hwm_last = std::max(hwm_last, r.hwm);
    }
    std::printf("%s\n", bench::add_machine(cli::JsonObject().add("bench", "api"), p.dtype)
                            .add("measure", "layers")
                            .add("nodes", p.nodes)
                            .add("tokens", p.layer_tokens)
                            .add("heads", p.heads)
                            .add("kv_heads", p.kv_heads)
                            .add("head_dim", p.head_dim)
                            .add("dtype", to_string(p.dtype))
                            .add("mask", "causal")
                            .add("layers", p.layers)
                            .add("first_call_gflops", first)
                            .add("later_calls_gflops_median", later)
                            .add("later_over_first", later / first)
                            .add("rss_mib_after_first", static_cast<double>(rss_first) / 1024)
                            .add("rss_mib_after_last", static_cast<double>(rss_last) / 1024)
                            .add("peak_rss_mib_after_first", static_cast<double>(hwm_first) / 1024)
                            .add("peak_rss_mib_after_last", static_cast<double>(hwm_last) / 1024)
                            .add("command", command)
                            .str()
                            .c_str());
  }
  return 0;
}

}  // namespace

int ringattn::cli::bench_api_main(const std::vector<std::string>& argv) {
  Args a("bench api",
         "The Ring as a library user calls it: P processes connect once, then (1) many small calls on warm\n"
         "connections — the cost of a call beyond its kernel — and (2) a run of --layers calls of one shape\n"
         "— throughput of later calls against the first, and memory after the first and the last.");
  a.option("nodes", "P", "ranks (processes)", "2")
      .option("rows", "N", "rows per rank in the overhead calls", "256")
      .option("heads", "N", "query heads", "8")
      .option("kv-heads", "N", "key/value heads", "8")
      .option("head-dim", "N", "head dimension", "128")
      .option("calls", "N", "timed overhead calls (after 10 warm-up calls)", "200")
      .option("layer-tokens", "N", "tokens of each layer call (all ranks)", "16384")
      .option("layers", "N", "consecutive layer calls", "32")
      .option("dtype", "T", "fp32 or bf16", "fp32")
      .option("threads", "N", "kernel threads per rank", "1")
      .option("timeout", "S", "seconds a peer may stay silent", "60")
      .internal("member", "R", "run as rank R")
      .internal("master", "HOST:PORT", "the launcher's rendezvous")
      .internal("ring-id", "N", "ring id");
  if (!a.parse(argv)) return 0;
  Plan p;
  p.nodes = a.integer("nodes", 1, 4096);
  p.rows = a.int64("rows");
  p.heads = a.int64("heads");
  p.kv_heads = a.int64("kv-heads");
  p.head_dim = a.int64("head-dim");
  p.calls = a.integer("calls", 1, 1 << 30);
  p.layer_tokens = a.int64("layer-tokens");
  p.layers = a.integer("layers", 2, 1 << 20);
  p.dtype = parse_dtype(a.str("dtype"));
  p.threads = a.integer("threads", 0, kMaxThreads);
  p.timeout = a.seconds("timeout", 0.001, 86400);
  p.log_level = a.log_level();
  p.quiet = a.quiet();
  if (p.nodes < 1 || p.rows < 1 || p.calls < 1 || p.layers < 2 || p.layer_tokens < 2 * p.nodes)
    throw InvalidArgument("bench api: --nodes, --rows, --calls >= 1, --layers >= 2, --layer-tokens >= 2 x nodes");
  if (auto m = a.maybe("member")) {
    const int rank = cli::parse_integer_as(*m, "--member", 0, p.nodes - 1);
    try {
      member(p, rank, a.str("master"), a.integer<std::uint64_t>("ring-id", 0, INT64_MAX));
    } catch (const std::exception& e) {
      node::emit_line(node::fail_line(node::fail_report_for(e, rank)));
      throw;
    }
    return 0;
  }
  return front(p, bench::shell_command("bench api", argv));
}
