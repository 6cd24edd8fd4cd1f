// `ringattn bench decode` — decode on stationary KV shards (Ring::decode) on P processes
// started by the launcher `run` uses, against what the ring's alternatives would cost.
//
// Per context length (every sequence of the batch holds that many cached tokens, spread
// over the ranks by the zigzag layout, K/V generated in the cache's dtype — no prefill):
//   latency    per decode step, the slowest rank's wall time of decode() (one token per
//              sequence, each owned by rank sequence mod P); median over --steps;
//   baseline   in the same run, between the steps: every rank streams its own cache rows
//              once (K and V, the placement decode reads), all ranks at once after a
//              barrier; the slowest rank's time, median. Decode attention reads each byte
//              once, so this is its floor on this machine;
//   bytes      payload bytes all ranks sent per generated token (queries, K/V of the new
//              token, partial states), beside the cache's bytes and what rotating the
//              cache around the ring (prefill's schedule) would move per step: (P-1) x
//              the whole cache.
// One JSON object per context on stdout; progress on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include "../common/machine.hpp"
#include "../common/shell_command.hpp"
#include "../../src/cli/stats.hpp"
#include "../../src/cli/log.hpp"
#include "ringattn/split.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/error.hpp"
#include "ringattn/kv_cache.hpp"
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
int bench_decode_main(const std::vector<std::string>& argv);
}

namespace {

using namespace ringattn;
using Clock = std::chrono::steady_clock;

struct Plan {
  int nodes = 4;
  std::vector<std::int64_t> contexts = {65536, 262144, 1048576};
  int batch = 1;
  std::int64_t heads = 32, kv_heads = 8, head_dim = 128;
  DType dtype = DType::bf16;
  int steps = 10;
  int threads = 1;
  double timeout = 120;
  std::optional<std::string> log_level;
  bool quiet = false;
};

std::vector<std::string> plan_args(const Plan& p) {
  std::string ctx;
  for (auto c : p.contexts) {
    if (!ctx.empty()) ctx += ',';
    ctx += std::to_string(c);
  }
  return {"--nodes", std::to_string(p.nodes), "--context", ctx, "--batch", std::to_string(p.batch), "--heads",
          std::to_string(p.heads), "--kv-heads", std::to_string(p.kv_heads), "--head-dim", std::to_string(p.head_dim),
          "--dtype", std::string(to_string(p.dtype)), "--steps", std::to_string(p.steps), "--threads",
          std::to_string(p.threads), "--timeout", std::to_string(p.timeout), "--log-level",
          p.quiet ? "error" : p.log_level.value_or("info")};
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Fills `n` elements of the dtype with finite values in [-1, 1) from a fast generator.
void fill(std::vector<std::byte>& out, std::int64_t n, DType dt, std::uint64_t seed) {
  out.resize(static_cast<std::size_t>(n) * dtype_size(dt));
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::int64_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const float f = static_cast<float>(static_cast<std::int32_t>(x >> 32)) * (1.0f / 2147483648.0f);
    if (dt == DType::bf16) {
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      const auto h = static_cast<std::uint16_t>(u >> 16);
      std::memcpy(out.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &f, 4);
    }
  }
}

// Reads every cached byte of every sequence once (the baseline), on `threads` threads.
std::uint64_t stream(const KVCache& cache, int threads) {
  const std::size_t row = static_cast<std::size_t>(cache.kv_heads() * cache.head_dim()) * dtype_size(cache.dtype());
  std::uint64_t acc = 0;
  for (auto s : cache.sequences()) {
    const auto view = cache.view(s);
    const std::size_t words = view.positions.size() * row / 8;
    for (const void* base : {view.k, view.v}) {
      const auto* w = static_cast<const std::uint64_t*>(base);
#pragma omp parallel for reduction(+ : acc) num_threads(threads) schedule(static)
      for (std::size_t i = 0; i < words; ++i) acc += w[i];
    }
  }
  return acc;
}

void member(const Plan& p, int rank, const std::string& master, std::uint64_t ring_id) {
  set_log_rank(rank);
  node::LauncherChannel launcher(rank);
  RingOptions o;
  o.rank = rank;
  o.world_size = p.nodes;
  o.threads = p.threads;
  o.timeout = p.timeout;
  o.connect_timeout = 60;
  o.ring_id = ring_id;
  o.master = master;
  o.master_is_external = true;
  o.limits.max_rows = std::max(p.batch, 1);
  o.limits.max_heads = p.heads;
  o.limits.max_kv_heads = p.kv_heads;
  o.limits.max_head_dim = p.head_dim;
  o.token = checked_token(launcher.token(o.connect_timeout), "the launcher's pipe");
  Ring ring = Ring::connect(o);
  const AttentionSpec spec{p.heads, p.kv_heads, p.head_dim, p.dtype, Mask::causal(), 0};
  const std::int64_t H = p.heads, KH = p.kv_heads, D = p.head_dim;
  std::vector<std::int32_t> no_seq;
  std::vector<std::int64_t> no_pos;
  std::vector<float> none;
  auto barrier = [&](KVCache& c) { ring.decode({spec, none, none, none, no_pos, no_seq}, c, none); };
  std::vector<std::byte> kbuf, vbuf;
  for (const std::int64_t ctx : p.contexts) {
    KVCache cache(KH, D, p.dtype);
    const auto pos = shard_positions(Layout::zigzag, ctx, p.nodes, rank).materialize();
    for (int s = 0; s < p.batch; ++s) {
      cache.reserve(s, static_cast<std::int64_t>(pos.size()) + p.steps + 4);
      constexpr std::int64_t kPiece = 65536;  // rows generated at a time
      for (std::size_t i = 0; i < pos.size(); i += kPiece) {
        const std::int64_t n = std::min<std::int64_t>(kPiece, static_cast<std::int64_t>(pos.size() - i));
        fill(kbuf, n * KH * D, p.dtype, 1000 * static_cast<std::uint64_t>(rank) + 7 * i + static_cast<std::uint64_t>(s));
        fill(vbuf, n * KH * D, p.dtype, 2000 * static_cast<std::uint64_t>(rank) + 7 * i + static_cast<std::uint64_t>(s) + 1);
        cache.append_raw(s, std::span<const std::int64_t>(pos.data() + i, static_cast<std::size_t>(n)), kbuf.data(),
                         vbuf.data());
      }
    }
    node::emit_line("FILLED " + cli::JsonObject().add("rank", rank).add("context", ctx).add("cache_bytes", static_cast<std::int64_t>(cache.bytes())).str());
    // This rank's tokens: sequences s with s mod P == rank, one per step.
    std::vector<std::int32_t> seqs;
    for (int s = rank; s < p.batch; s += p.nodes) seqs.push_back(s);
    const auto n = seqs.size();
    std::vector<float> q(n * static_cast<std::size_t>(H * D), 0.01f), k(n * static_cast<std::size_t>(KH * D), 0.02f),
        v(n * static_cast<std::size_t>(KH * D), 0.03f), out(n * static_cast<std::size_t>(H * D));
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * static_cast<float>(i % 97) - 0.5f;
    for (int step = -2; step < p.steps; ++step) {  // two warm-up steps
      std::vector<std::int64_t> dpos(n, ctx + step + 2);
      barrier(cache);
      const DecodeStats st = ring.decode({spec, q, k, v, dpos, seqs}, cache, out);
      barrier(cache);
      const auto t0 = Clock::now();
      const std::uint64_t sum = stream(cache, p.threads);
      const double stream_s = since(t0);
      if (step < 0) continue;
      node::emit_line("STEP " + cli::JsonObject()
                                    .add("rank", rank)
                                    .add("context", ctx)
                                    .add("step", step)
                                    .add("seconds", st.seconds)
                                    .add("compute_seconds", st.compute_seconds)
                                    .add("wait_seconds", st.wait_seconds)
                                    .add("bytes_sent", static_cast<std::int64_t>(st.bytes_sent))
                                    .add("cache_rows", st.cache_rows)
                                    .add("tokens", st.tokens)
                                    .add("stream_seconds", stream_s)
                                    .add("cache_bytes", static_cast<std::int64_t>(cache.bytes()))
                                    .add("checksum", static_cast<std::int64_t>(sum & 0xffff))
                                    .str());
    }
  }
  ring.close();
}

struct StepRow {
  int rank = 0, step = 0;
  std::int64_t context = 0, bytes = 0, cache_bytes = 0, tokens = 0, rows = 0;
  double seconds = 0, compute = 0, wait = 0, stream = 0;
};

int front(const Plan& p, const std::string& command) {
  const std::string token = generate_token();
  const std::uint64_t ring_id = new_ring_id();
  RingOptions ro;
  ro.world_size = p.nodes;
  ro.limits.max_rows = std::max(p.batch, 1);
  ro.limits.max_heads = p.heads;
  ro.limits.max_kv_heads = p.kv_heads;
  ro.limits.max_head_dim = p.head_dim;
  const auto rendezvous = run::serve_local_rendezvous(ro, p.nodes, ring_id, token, 60);
  std::vector<StepRow> rows;
  run::LaunchSpec ls;
  ls.ranks = p.nodes;
  ls.token = token;
  ls.timeout_seconds = p.timeout;
  ls.quiet = p.quiet;
  ls.expected = {"", ""};
  ls.arguments = [&](int r) {
    std::vector<std::string> a = {"bench", "decode", "--member", std::to_string(r), "--master",
                                  "127.0.0.1:" + std::to_string(rendezvous->port()), "--ring-id", std::to_string(ring_id)};
    const auto pa = plan_args(p);
    a.insert(a.end(), pa.begin(), pa.end());
    return a;
  };
  ls.on_line = [&](int, const std::string& line) {
    if (line.rfind("FILLED ", 0) == 0) {
      const infer::Json j = infer::parse_json(line.substr(7));
      auto num = [&](const char* key) { return infer::json_number(j, key).value_or(0.0); };
      cli::logger("bench")->info("rank {}: cache of {:.0f} tokens filled ({:.2f} GiB)", num("rank"), num("context"),
                                 num("cache_bytes") / (1 << 30));
      return;
    }
    if (line.rfind("STEP ", 0) != 0) return;
    const infer::Json j = infer::parse_json(line.substr(5));
    auto num = [&](const char* key) { return infer::json_number(j, key).value_or(0.0); };
    rows.push_back({static_cast<int>(num("rank")), static_cast<int>(num("step")), static_cast<std::int64_t>(num("context")),
                    static_cast<std::int64_t>(num("bytes_sent")), static_cast<std::int64_t>(num("cache_bytes")),
                    static_cast<std::int64_t>(num("tokens")), static_cast<std::int64_t>(num("cache_rows")), num("seconds"),
                    num("compute_seconds"), num("wait_seconds"), num("stream_seconds")});
    if (rows.back().rank == 0) cli::logger("bench")->info("context {}: step {} of {}", rows.back().context, rows.back().step + 1, p.steps);
  };
  cli::logger("bench")->info("{} ranks, batch {}, contexts {}, {} steps each", p.nodes, p.batch, plan_args(p)[3], p.steps);
  run::launch(ls);

  for (const std::int64_t ctx : p.contexts) {
    std::vector<double> latency(static_cast<std::size_t>(p.steps), 0), base(latency), compute(latency), wait(latency);
    std::vector<double> bytes(latency);
    double cache_bytes = 0, tokens = 0;
    std::int64_t max_rows = 0, min_rows = -1;
    for (const auto& r : rows) {
      if (r.context != ctx) continue;
      const auto s = static_cast<std::size_t>(r.step);
      latency[s] = std::max(latency[s], r.seconds);
      base[s] = std::max(base[s], r.stream);
      compute[s] = std::max(compute[s], r.compute);
      wait[s] = std::max(wait[s], r.wait);
      bytes[s] += static_cast<double>(r.bytes);
      if (r.step == 0) {
        cache_bytes += static_cast<double>(r.cache_bytes);
        tokens = static_cast<double>(r.tokens);
        max_rows = std::max(max_rows, r.rows);
        min_rows = min_rows < 0 ? r.rows : std::min(min_rows, r.rows);
      }
    }
    const double lat = cli::median(latency), bl = cli::median(base);
    const double per_token = cli::median(bytes) / std::max(tokens, 1.0);
    const double rotate = static_cast<double>(p.nodes - 1) * cache_bytes / std::max(tokens, 1.0);
    std::printf("%s\n", bench::add_machine(cli::JsonObject().add("bench", "decode"), p.dtype)
                            .add("nodes", p.nodes)
                            .add("context", ctx)
                            .add("batch", p.batch)
                            .add("heads", p.heads)
                            .add("kv_heads", p.kv_heads)
                            .add("head_dim", p.head_dim)
                            .add("dtype", to_string(p.dtype))
                            .add("threads_per_rank", p.threads)
                            .add("steps", p.steps)
                            .add("cache_bytes", cache_bytes)
                            .add("latency_ms_median", 1e3 * lat)
                            .add("compute_ms_median", 1e3 * cli::median(compute))
                            .add("wait_ms_median", 1e3 * cli::median(wait))
                            .add("stream_ms_median", 1e3 * bl)
                            .add("latency_over_stream", lat / bl)
                            .add("bytes_per_token", per_token)
                            .add("cache_over_bytes_per_token", cache_bytes / per_token)
                            .add("rotate_bytes_per_token", rotate)
                            .add("rows_read_max_over_min", static_cast<double>(max_rows) / static_cast<double>(std::max<std::int64_t>(min_rows, 1)))
                            .add("command", command)
                            .str()
                            .c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int ringattn::cli::bench_decode_main(const std::vector<std::string>& argv) {
  Args a("bench decode",
         "Decode on stationary KV shards: P processes hold a generated KV cache of each context length, then\n"
         "decode one token per sequence per step. Per context: the slowest rank's step latency against the\n"
         "same run's memory baseline (every rank streaming its cache once), and the bytes moved per token\n"
         "against the cache and against rotating the cache around the ring.");
  a.option("nodes", "P", "ranks (processes)", "4")
      .option("context", "LIST", "cached tokens per sequence, comma-separated", "65536,262144,1048576")
      .option("batch", "B", "sequences decoded together (one token each per step)", "1")
      .option("heads", "N", "query heads", "32")
      .option("kv-heads", "N", "key/value heads", "8")
      .option("head-dim", "N", "head dimension", "128")
      .option("dtype", "T", "cache dtype: bf16 or fp32", "bf16")
      .option("steps", "N", "timed decode steps per context (after 2 warm-up steps)", "10")
      .option("threads", "N", "kernel threads per rank", "1")
      .option("timeout", "S", "seconds a peer may stay silent", "120")
      .internal("member", "R", "run as rank R")
      .internal("master", "HOST:PORT", "the launcher's rendezvous")
      .internal("ring-id", "N", "ring id");
  if (!a.parse(argv)) return 0;
  Plan p;
  p.nodes = a.integer("nodes", 1, 4096);
  p.contexts.clear();
  for (const auto& c : split_commas(a.str("context"))) p.contexts.push_back(cli::parse_count(c, "--context"));
  p.batch = a.integer("batch", 1, 1 << 20);
  p.heads = a.int64("heads");
  p.kv_heads = a.int64("kv-heads");
  p.head_dim = a.int64("head-dim");
  p.dtype = parse_dtype(a.str("dtype"));
  p.steps = a.integer("steps", 1, 1 << 30);
  p.threads = a.integer("threads", 1, kMaxThreads);
  p.timeout = a.seconds("timeout", 0.001, 86400);
  p.log_level = a.log_level();
  p.quiet = a.quiet();
  if (p.nodes < 1 || p.batch < 1 || p.steps < 1 || p.threads < 1 || p.contexts.empty())
    throw InvalidArgument("bench decode: --nodes, --batch, --steps, --threads >= 1 and at least one --context");
  for (auto c : p.contexts)
    if (c < 2 * p.nodes) throw InvalidArgument("bench decode: --context " + std::to_string(c) + " must be >= 2 x nodes");
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
  return front(p, bench::shell_command("bench decode", argv));
}
