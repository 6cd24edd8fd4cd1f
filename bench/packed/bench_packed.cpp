// `ringattn bench packed` — a packed batch of prompts (documents) on P ranks, measured two
// ways that need no network and no idle machine:
//   balance   useful work (visible (query, key) pairs, causal within documents) per rank,
//             max/mean, for shard_documents() and for contiguous sharding of the packed
//             sequence: counted, not timed;
//   speed     every rank's work as the ring does it (its queries folded against every
//             rank's block, documents included), in this process on one thread, timed in
//             thread CPU time so that other processes on a loaded machine do not count;
//             against the same for one causal sequence of the same length (zigzag), run
//             alternately, median of --reps.
// One JSON object per P on stdout, with the command that made it; progress on stderr.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "../common/machine.hpp"
#include "../common/shell_command.hpp"
#include "../../src/cli/log.hpp"
#include "ringattn/split.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/packing.hpp"
#include "../../src/cli/args.hpp"
#include "../../src/cli/json_object.hpp"
#include "../../src/node/job.hpp"
#include "../../src/oracle/random_inputs.hpp"

namespace ringattn::cli {
int bench_packed_main(const std::vector<std::string>& argv);
}

namespace {

using namespace ringattn;

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::vector<float> gather(const std::vector<float>& all, const std::vector<std::int64_t>& pos, std::int64_t width) {
  std::vector<float> out;
  out.reserve(pos.size() * static_cast<std::size_t>(width));
  for (auto p : pos) out.insert(out.end(), all.begin() + p * width, all.begin() + (p + 1) * width);
  return out;
}

// Useful FLOPs and CPU seconds of every rank's folds over every rank's block.
std::pair<double, double> ring_work(BlockAttention& attn, const std::vector<PackedShard>& shards,
                                    const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, std::int64_t heads, std::int64_t kv_heads,
                                    std::int64_t d) {
  double flops = 0, seconds = 0;
  for (const auto& me : shards) {
    const auto qr = gather(q, me.positions, heads * d);
    const Positions qp = Positions::from_sorted(me.positions.data(), static_cast<std::int64_t>(me.positions.size()));
    OnlineSoftmaxState st(qp.size(), heads, d);
    for (const auto& blk : shards) {
      const auto kr = gather(k, blk.positions, kv_heads * d), vr = gather(v, blk.positions, kv_heads * d);
      const Positions kp = Positions::from_sorted(blk.positions.data(), static_cast<std::int64_t>(blk.positions.size()));
      const double t0 = thread_seconds();
      flops += attn.fold(qr.data(), qp, me.documents, kr.data(), vr.data(), kp, blk.documents, st).useful_flops;
      seconds += thread_seconds() - t0;
    }
  }
  return {flops, seconds};
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

}  // namespace

int ringattn::cli::bench_packed_main(const std::vector<std::string>& argv) {
  Args a("bench packed", "A packed batch of prompts on P ranks: useful-work balance of shard_documents() against\n"
                         "contiguous sharding (counted), and the ranks' kernel work on one thread (thread CPU time)\n"
                         "against one causal sequence of the same length. Prints one JSON object per P.");
  a.option("nodes", "LIST", "ring sizes", "4")
      .option("prompts", "N", "prompts of the generated batch", "64")
      .option("min", "N", "shortest prompt", "16")
      .option("max", "N", "longest prompt", "8192")
      .option("seed", "N", "seed of the prompt lengths (bounded Pareto, shape 0.8)", "20261130")
      .option("cu-seqlens", "FILE", "the batch's cumulative lengths instead (as for run --cu-seqlens)")
      .option("heads", "N", "query heads", "8")
      .option("kv-heads", "N", "key/value heads", "2")
      .option("head-dim", "N", "head dimension", "128")
      .option("reps", "N", "timed repetitions of each (alternating)", "3");
  if (!a.parse(argv)) return 0;
  const std::vector<std::int64_t> cu =
      a.maybe("cu-seqlens") ? node::read_cu_seqlens(a.str("cu-seqlens"))
                            : oracle::mixed_batch_cu_seqlens(a.integer("prompts", 1, 1 << 20), a.int64("min"),
                                                             a.int64("max"), a.integer<std::uint64_t>("seed", 0, INT64_MAX));
  const std::int64_t n = cu.back(), h = a.int64("heads"), kvh = a.int64("kv-heads"), d = a.int64("head-dim");
  const std::int64_t reps = a.int64("reps");
  if (reps < 1) throw InvalidArgument("bench packed: --reps must be >= 1");
  const std::string command = bench::shell_command("bench packed", argv);
  const auto q = oracle::random_normal(static_cast<std::size_t>(n * h * d), 1);
  const auto k = oracle::random_normal(static_cast<std::size_t>(n * kvh * d), 2);
  const auto v = oracle::random_normal(static_cast<std::size_t>(n * kvh * d), 3);
  AttentionConfig c;
  c.heads = h;
  c.kv_heads = kvh;
  c.head_dim = d;
  c.mask = Mask::causal();
  c.threads = 1;
  BlockAttention attn(c);
  const std::vector<std::int64_t> one = {0, n};
  for (const auto P : parse_int_list(a.str("nodes"), "--nodes")) {
    if (P < 1 || P > 4096) throw InvalidArgument("bench packed: --nodes values must be in 1..4096");
    const int p = static_cast<int>(P);
    const auto packed = shard_documents(cu, p), single = shard_documents(one, p);
    const double balanced = max_over_mean(visible_pairs(cu, packed, Mask::causal()));
    const double contiguous = max_over_mean(visible_pairs(cu, shard_documents_contiguous(cu, p), Mask::causal()));
    std::vector<double> gp, gs;
    for (std::int64_t r = 0; r < reps; ++r) {
      cli::logger("bench")->info("P={} rep {}/{}", p, r + 1, reps);
      const auto [fp, sp] = ring_work(attn, packed, q, k, v, h, kvh, d);
      const auto [fs, ss] = ring_work(attn, single, q, k, v, h, kvh, d);
      gp.push_back(fp / sp / 1e9);
      gs.push_back(fs / ss / 1e9);
    }
    cli::JsonObject j;
    j.add("bench", "packed");
    bench::add_machine(j, DType::f32)
        .add("nodes", p)
        .add("documents", static_cast<std::int64_t>(cu.size() - 1))
        .add("tokens", n)
        .add("heads", h)
        .add("kv_heads", kvh)
        .add("head_dim", d)
        .add("mask", "causal")
        .add("work_max_over_mean", balanced)
        .add("work_max_over_mean_contiguous", contiguous)
        .add("gflops_packed", median(gp))
        .add("gflops_single_sequence", median(gs))
        .add("packed_over_single", median(gp) / median(gs))
        .add("command", command);
    std::printf("%s\n", j.str().c_str());
    std::fflush(stdout);
  }
  return 0;
}
