// `ringattn plan`: the seed's cost arithmetic for a given model, context and cluster.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "ringattn/types.hpp"
#include "../cli/args.hpp"
#include "cost_model.hpp"
#include "plan_report.hpp"
#include "units.hpp"

namespace ringattn::cli {

int plan_main(const std::vector<std::string>& argv);

}  // namespace ringattn::cli

namespace ringattn::plan {
namespace {

// This machine's class (DESIGN.md, measured): one Zen 4 core reaches about 110 GFLOP/s
// in fp32 oneDNN matmuls and 220 in bf16; loopback and veth TCP carry about 2.5 GB/s.
constexpr double kAssumedCoreFlopsFp32 = 110e9;
constexpr double kAssumedCoreFlopsBf16 = 220e9;
constexpr double kAssumedLinkBytesPerSecond = 2.5e9;

struct DtypeInfo {
  int bytes;
  double assumed_core_flops;
};

// The dtypes of every other command, spelled the same (parse_dtype). fp16 is not one:
// the report would have to print a name the rest of the program does not know; its
// cost is bf16's with --flops.
DtypeInfo dtype_info(const std::string& name) {
  try {
    return parse_dtype(name) == DType::bf16 ? DtypeInfo{2, kAssumedCoreFlopsBf16} : DtypeInfo{4, kAssumedCoreFlopsFp32};
  } catch (const InvalidArgument&) {
    throw InvalidArgument("plan: --dtype expects fp32 or bf16, got '" + name + "'");
  }
}

std::string ceil_div_text(std::int64_t a, std::int64_t b) { return std::to_string((a + b - 1) / b); }

}  // namespace
}  // namespace ringattn::plan

int ringattn::cli::plan_main(const std::vector<std::string>& argv) {
  using namespace ringattn::plan;
  Args args("plan",
            "The cost of exact ring attention for a model, context and cluster: memory bill, per-node\n"
            "memory, per-step compute vs transfer with a verdict, the minimum block b* for overlap,\n"
            "ring vs Ulysses traffic, the predicted time of the ring, Ulysses and each hybrid (Ulysses\n"
            "in groups, the ring across them) and causal load balance. Verdict: hidden if compute/transfer >= 1.5,\n"
            "marginal if >= 1, else stalls. Without --flops/--bandwidth it assumes this machine's class:\n"
            "--cores x 110 GFLOP/s (fp32) or 220 GFLOP/s (bf16) per node, and a 2.5 GB/s link.\n"
            "Of --seq, --nodes and --block give any two (a lone --block uses the default --nodes).\n"
            "Counts take binary multiples (1M = 1048576, 1.5M) or exponents (1e6); rates take 400e12 or 50G\n"
            "(SI: 50G = 5e10).");
  args.option("d", "D", "model width = heads x head_dim (alternative to --head-dim)")
      .option("heads", "H", "query heads", "32")
      .option("head-dim", "D", "width of one head", "128")
      .option("kv-heads", "K", "K/V heads (GQA); must divide --heads (default: --heads)")
      .option("layers", "L", "transformer layers", "32")
      .option("seq", "N", "context length in tokens", "1M")
      .option("nodes", "P", "ring nodes", "64")
      .option("block", "B", "tokens per node b (default ceil(seq / nodes))")
      .option("dtype", "T", "element type of Q, K, V on the wire: fp32 or bf16", "bf16")
      .option("flops", "F", "useful FLOP/s of one node, e.g. 400e12 (default: assumed, see above)")
      .option("bandwidth", "B", "link bytes/s between neighbours, e.g. 50e9 or 50G (default: assumed)")
      .option("group-bandwidth", "B", "bytes/s a node moves inside a mesh group (Ulysses' all-to-alls; default: --bandwidth)")
      .option("cores", "C", "cores per node for the assumed --flops", "1")
      .option("cached", "S", "a prompt's tokens found in the daemons' prefix cache (with --new: which way its rest is computed)")
      .option("new", "T", "that prompt's tokens not cached (with --cached)")
      .flag("json", "print one JSON object instead of text");
  if (!args.parse(argv)) return 0;

  PlanInput in;
  in.heads = args.int64("heads");
  const DtypeInfo dtype = dtype_info(args.str("dtype"));
  in.dtype_bytes = dtype.bytes;
  if (args.has("d")) {
    const std::int64_t d = args.int64("d");
    if (in.heads < 1 || d < 1 || d % in.heads != 0)
      throw InvalidArgument("plan: --d " + std::to_string(d) + " is not a multiple of --heads " + std::to_string(in.heads));
    in.head_dim = d / in.heads;
    if (args.has("head-dim") && args.int64("head-dim") != in.head_dim)
      throw InvalidArgument("plan: --d " + std::to_string(d) + " disagrees with --heads x --head-dim = " +
                            std::to_string(in.heads * args.int64("head-dim")) + "; give one of --d and --head-dim");
  } else {
    in.head_dim = args.int64("head-dim");
  }
  in.kv_heads = args.has("kv-heads") ? args.int64("kv-heads") : in.heads;
  in.layers = args.int64("layers");

  const bool has_seq = args.has("seq"), has_nodes = args.has("nodes");
  in.seq = cli::parse_count(args.str("seq"), "--seq");
  in.nodes = args.int64("nodes");
  if (args.has("block")) {
    const std::int64_t b = cli::parse_count(args.str("block"), "--block");
    if (b < 1) throw InvalidArgument("plan: --block must be at least 1");
    in.block = b;
    if (has_seq && has_nodes) {
      if (in.nodes < 1 || (in.seq + in.nodes - 1) / in.nodes != b)
        throw InvalidArgument("plan: --block " + std::to_string(b) + " disagrees with --seq / --nodes = " +
                              ceil_div_text(in.seq, std::max<std::int64_t>(in.nodes, 1)) + "; give two of the three");
    } else if (has_seq) {
      in.nodes = (in.seq + b - 1) / b;
    } else {
      if (in.nodes > INT64_MAX / b) throw InvalidArgument("plan: --block x --nodes overflows");
      in.seq = b * in.nodes;
    }
  }

  if (args.has("flops")) {
    in.flops = parse_rate(args.str("flops"), "--flops");
  } else {
    const std::int64_t cores = args.int64("cores");
    if (cores < 1) throw InvalidArgument("plan: --cores must be at least 1");
    in.flops = static_cast<double>(cores) * dtype.assumed_core_flops;
    in.flops_assumed = true;
  }
  if (args.has("bandwidth")) {
    in.bandwidth = parse_rate(args.str("bandwidth"), "--bandwidth");
  } else {
    in.bandwidth = kAssumedLinkBytesPerSecond;
    in.bandwidth_assumed = true;
  }

  if (args.has("group-bandwidth")) in.group_bandwidth = parse_rate(args.str("group-bandwidth"), "--group-bandwidth");

  if (args.has("cached") != args.has("new")) throw InvalidArgument("plan: --cached and --new go together (a prompt's cached and new tokens)");
  if (args.has("cached")) {
    in.cached = cli::parse_count(args.str("cached"), "--cached");
    in.fresh = cli::parse_count(args.str("new"), "--new");
  }
  const Plan plan = make_plan(in);
  const std::string out = args.has("json") ? format_plan_json(plan) : format_plan_text(plan);
  std::fputs(out.c_str(), stdout);
  return 0;
}
