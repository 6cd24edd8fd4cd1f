// `ringattn bench overlap` — does double buffering hide the ring's transfers behind the
// block kernel, and from which block size b on? The front process starts P members
// (processes of this binary, each on its own CPUs; through a launch prefix they can
// sit in network namespaces, see deploy/netns/testbed.sh), collects their per-b
// measurements (overlap_worker.hpp), finds the crossovers (overlap_model.hpp) and writes
// CSV, JSON lines and one SVG plot per mask (overlap_report.hpp).
//
// Honesty about the link: without --hosts the members talk over 127.0.0.1 (loopback,
// unshaped); with --hosts they talk to exactly those addresses and the outputs carry
// --link, the label the launcher gives the link (the testbed fills it in).
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../common/machine.hpp"
#include "../common/shell_command.hpp"
#include "overlap_model.hpp"
#include "overlap_report.hpp"
#include "overlap_worker.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/error.hpp"
#include "../../src/cli/log.hpp"
#include "../../src/cli/args.hpp"
#include "../../src/node/report.hpp"
#include "../../src/run/launcher.hpp"
#include "../../src/run/local_rendezvous.hpp"

namespace ringattn::cli {
int bench_overlap_main(const std::vector<std::string>& argv);
}

namespace {

using namespace ringattn;
using namespace ringattn::bench::overlap;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) {
    if (!out.empty()) out += ',';
    out += i;
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

using bench::first_line_of;
using bench::machine;

std::string load_1min() { return split(first_line_of("/proc/loadavg", ""), ' ').front(); }

void declare(cli::Args& a) {
  a.option("b", "LIST|LO:HI", "block sizes, or a range in steps of about x1.41 (even sizes)", "32:8192")
      .option("heads", "N", "query heads", "32")
      .option("kv-heads", "N", "key/value heads (default: heads)")
      .option("head-dim", "N", "head dimension", "128")
      .option("dtype", "T", "kernel and wire dtype: bf16 or fp32 (bf16 runs everywhere: without bf16 units the kernel multiplies fp32)", "bf16")
      .option("nodes", "P", "ring members", "2")
      .option("mask", "LIST", "none (contiguous layout) and/or causal (zigzag layout)", "none,causal")
      .option("cores", "N", "CPUs per node (default: this machine's CPUs / nodes)")
      .option("min-seconds", "S", "timed seconds per step kind and block size (at least 5 rounds)", "1")
      .option("max-reps", "N", "most timed rounds per block size", "40")
      .option("timeout", "S", "network deadline of every wait", "300")
      .option("io-priority", "N", "nice levels the transport's I/O thread runs above the kernel threads", "0")
      .option("hosts", "LIST", "host:port per rank (default: loopback, free ports)")
      .option("launch", "PREFIX", "command prefix per member, {rank} substituted (e.g. 'ip netns exec ra{rank}')")
      .option("link", "TEXT", "label of the link for the outputs (the testbed sets it)")
      .option("out", "DIR", "where to write overlap.csv, overlap.jsonl and overlap-<mask>.svg", "overlap-results")
      .option("nice", "N", "priority of the members, also as their session's autogroup nice (root for N < 0)")
      .option("replot", "DIR", "re-analyse a finished sweep in DIR and redraw its plots; measures nothing")
      .flag("backward", "sweep the backward ring's step (Ring::backward): the block backward kernel against the\n"
                        "K/V block plus its fp32 dK/dV accumulators per pass; b* by the backward's formula")
      .option("measure-flops", "B", "only print the kernel's useful FLOP/s at block size B (node 0's CPUs; with --backward the\n"
              "block backward's) and exit")
      // What the sweep passes to the members it starts; not for users.
      .internal("worker", "", "run as ring member --rank")
      .internal("rank", "R", "member rank")
      .internal("peers", "LIST", "host:port per rank, or - for the rendezvous at --listen")
      .internal("listen", "HOST:PORT", "member's listen address, or the rendezvous")
      .internal("ring-id", "N", "ring id");
}

SweepSpec spec_from(const cli::Args& a) {
  SweepSpec s;
  const std::string bs = a.str("b");
  if (const auto colon = bs.find(':'); colon != std::string::npos) {
    s.blocks = sqrt2_ladder(cli::parse_count(bs.substr(0, colon), "--b"), cli::parse_count(bs.substr(colon + 1), "--b"));
  } else {
    s.blocks = cli::parse_int_list(bs, "--b");
  }
  std::sort(s.blocks.begin(), s.blocks.end());
  for (auto b : s.blocks)
    if (b < 2 || b % 2) throw InvalidArgument("bench overlap: --b values must be even and >= 2, got " + std::to_string(b));
  s.heads = a.int64("heads");
  s.kv_heads = a.has("kv-heads") ? a.int64("kv-heads") : s.heads;
  s.head_dim = a.int64("head-dim");
  s.dtype = parse_dtype(a.str("dtype"));
  s.nodes = a.integer("nodes", 2, 4096);
  s.masks = split(a.str("mask"), ',');
  for (const auto& m : s.masks)
    if (m != "none" && m != "causal") throw InvalidArgument("bench overlap: --mask takes none and/or causal, got '" + m + "'");
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  s.cores = a.has("cores") ? a.integer("cores", 1, kMaxThreads) : static_cast<int>(std::max(1L, cpus / s.nodes));
  s.min_seconds = a.seconds("min-seconds", 0.001, 3600);
  s.max_reps = a.integer("max-reps", 1, 1 << 30);
  s.timeout_seconds = a.seconds("timeout", 0.001, 86400);
  s.io_priority = a.integer("io-priority", 0, 39);
  s.backward = a.has("backward");
  return s;
}

std::vector<std::string> spec_args(const SweepSpec& s) {
  std::vector<std::string> bs;
  for (auto b : s.blocks) bs.push_back(std::to_string(b));
  const std::string bl = join(bs), ml = join(s.masks);
  std::vector<std::string> args = {"--b", bl, "--heads", std::to_string(s.heads), "--kv-heads", std::to_string(s.kv_heads),
          "--head-dim", std::to_string(s.head_dim), "--dtype", std::string(to_string(s.dtype)),
          "--nodes", std::to_string(s.nodes), "--mask", ml, "--cores", std::to_string(s.cores),
          "--min-seconds", std::to_string(s.min_seconds), "--max-reps", std::to_string(s.max_reps),
          "--timeout", std::to_string(s.timeout_seconds), "--io-priority", std::to_string(s.io_priority)};
  if (s.backward) args.push_back("--backward");
  return args;
}

// Starts the members with the launcher `ringattn run` uses, serves their rendezvous
// (unless --hosts fixes the addresses) and collects their rows. Throws if one fails.
std::vector<StepRow> run_members(const SweepSpec& spec, const std::vector<std::string>& hosts,
                                 const std::string& launch, const std::optional<std::string>& log_level,
                                 std::string& node_cpus) {
  const std::string token = launcher_token();
  const std::uint64_t ring_id = new_ring_id();
  const RingOptions ro = member_options(spec, 0);
  std::unique_ptr<RendezvousServer> rendezvous;
  if (hosts.empty()) rendezvous = run::serve_local_rendezvous(ro, spec.nodes, ring_id, token, ro.connect_timeout);
  std::vector<StepRow> rows;
  run::LaunchSpec ls;
  ls.ranks = spec.nodes;
  ls.launch_prefix = launch;
  ls.token = token;
  ls.timeout_seconds = spec.timeout_seconds;
  ls.expected = {ro.fingerprint(), token_fingerprint(token)};
  ls.arguments = [&](int r) {
    std::vector<std::string> args = {"bench", "overlap", "--worker", "--rank", std::to_string(r), "--ring-id",
                                     std::to_string(ring_id)};
    const auto sa = spec_args(spec);
    args.insert(args.end(), sa.begin(), sa.end());
    if (log_level) args.insert(args.end(), {"--log-level", *log_level});
    if (rendezvous) args.insert(args.end(), {"--peers", "-", "--listen", "127.0.0.1:" + std::to_string(rendezvous->port())});
    else args.insert(args.end(), {"--peers", join(hosts), "--listen", hosts[static_cast<std::size_t>(r)]});
    return args;
  };
  ls.on_line = [&](int r, const std::string& line) {
    if (line.rfind("INFO ", 0) == 0 && r == 0) node_cpus = line.substr(line.find("cpus=") + 5);
    else if (auto row = parse_row_line(line)) rows.push_back(*row);
  };
  run::launch(ls);
  return rows;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
  if (!f) throw FileError("bench overlap: cannot write " + p.string());
}

// Analysis and outputs of a sweep: per mask, rank 0's rows.
void write_outputs(const SweepSpec& spec, const std::vector<StepRow>& rows, const RunInfo& info, const fs::path& out) {
  fs::create_directories(out);
  std::string csv = csv_header(), jsonl, text;
  const int esz = static_cast<int>(dtype_size(spec.dtype));
  for (const auto& mask : spec.masks) {
    std::vector<StepRow> mine;
    for (const auto& r : rows)
      if (r.rank == 0 && r.mask == mask) mine.push_back(r);
    if (mine.size() < 2) throw Error("bench overlap: rank 0 reported " + std::to_string(mine.size()) + " rows for mask " + mask);
    std::sort(mine.begin(), mine.end(), [](const StepRow& x, const StepRow& y) { return x.b < y.b; });
    const SweepSummary s =
        summarize(mine, spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim, esz, spec.cores, spec.backward);
    for (const auto& r : mine) {
      csv += csv_row(r, s);
      jsonl += row_json(r, s, spec, info) + "\n";
    }
    jsonl += summary_json(s, spec, info) + "\n";
    text += summary_text(s) + "\n";
    write_file(out / ("overlap-" + mask + ".svg"), plot_svg(mine, s, spec, info));
  }
  write_file(out / "overlap.csv", csv);
  write_file(out / "overlap.jsonl", jsonl);
  std::fputs(jsonl.c_str(), stdout);
  std::fflush(stdout);
  std::fputs(text.c_str(), stderr);
}

// With sched_autogroup (the default on desktop-style kernels), CPU time is first shared
// between sessions and only then by nice inside one, so both are set.
void set_priority(int nice) {
  if (::setpriority(PRIO_PROCESS, 0, nice) != 0)
    cli::logger("bench")->warn("cannot set nice {}: {}", nice, std::strerror(errno));
  std::ofstream ag("/proc/self/autogroup");
  ag << nice;
  ag.flush();
  if (!ag) cli::logger("bench")->warn("cannot set the autogroup nice to {}", nice);
}

int front(const cli::Args& a, const SweepSpec& spec, const std::vector<std::string>& argv) {
  std::vector<std::string> hosts;
  if (auto h = a.maybe("hosts")) hosts = split(*h, ',');
  if (!hosts.empty() && static_cast<int>(hosts.size()) != spec.nodes)
    throw InvalidArgument("bench overlap: --hosts lists " + std::to_string(hosts.size()) + " addresses for " +
                          std::to_string(spec.nodes) + " nodes");
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (spec.nodes * spec.cores > cpus)
    cli::logger("bench")->warn("{} nodes x {} cores > {} CPUs: nodes share CPUs", spec.nodes, spec.cores, cpus);
  RunInfo info;
  info.link = a.maybe("link").value_or(hosts.empty() ? "loopback 127.0.0.1, unshaped" : "hosts " + *a.maybe("hosts"));
  info.machine = machine() + "; " + bench::paths(spec.dtype);
  info.command = bench::shell_command("bench overlap", argv);  // pasted into a shell, it runs this sweep again
  info.load_before = load_1min();
  const auto t0 = Clock::now();
  const auto rows = run_members(spec, hosts, a.maybe("launch").value_or(""), a.log_level(), info.node_cpus);
  info.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  info.load_after = load_1min();

  const std::string out = a.str("out");
  write_outputs(spec, rows, info, out);
  std::fprintf(stderr, "bench overlap: swept in %.0f s, link: %s; wrote %s/overlap.{csv,jsonl} and overlap-<mask>.svg\n",
               info.seconds, info.link.c_str(), out.c_str());
  return 0;
}

// The value of "key" in one line of our own JSON (strings unescaped of \" only).
std::string json_field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const auto at = line.find(k);
  if (at == std::string::npos) return "";
  std::size_t i = at + k.size();
  if (line[i] != '"') return line.substr(i, line.find_first_of(",}", i) - i);
  std::string v;
  for (++i; i < line.size() && line[i] != '"'; ++i) {
    if (line[i] == '\\' && i + 1 < line.size()) ++i;
    v += line[i];
  }
  return v;
}

// Re-runs the analysis and the plots on a finished sweep's overlap.csv (and the run
// details in its overlap.jsonl), e.g. after the analysis changed; nothing is measured.
int replot(const fs::path& dir) {
  const auto t0 = Clock::now();
  std::ifstream csv(dir / "overlap.csv"), js(dir / "overlap.jsonl");
  if (!csv || !js) throw FileError("bench overlap: --replot needs overlap.csv and overlap.jsonl in " + dir.string());
  std::string text((std::istreambuf_iterator<char>(csv)), std::istreambuf_iterator<char>()), line, summary;
  while (std::getline(js, line))
    if (line.find("\"kind\":\"summary\"") != std::string::npos) {
      summary = line;
      break;
    }
  if (summary.empty()) throw FileError("bench overlap: no summary line in " + (dir / "overlap.jsonl").string());
  SweepSpec spec;
  spec.heads = std::stoll(json_field(summary, "heads"));
  spec.kv_heads = std::stoll(json_field(summary, "kv_heads"));
  spec.head_dim = std::stoll(json_field(summary, "head_dim"));
  spec.dtype = parse_dtype(json_field(summary, "dtype"));
  spec.nodes = std::stoi(json_field(summary, "nodes"));
  spec.cores = std::stoi(json_field(summary, "cores_per_node"));
  spec.backward = json_field(summary, "pass") == "backward";
  RunInfo info;
  info.link = json_field(summary, "link");
  info.machine = json_field(summary, "machine");
  info.command = json_field(summary, "command");
  info.node_cpus = json_field(summary, "node0_cpus");
  info.load_before = json_field(summary, "load_before");
  info.load_after = json_field(summary, "load_after");
  info.seconds = std::stod(json_field(summary, "sweep_seconds"));
  const auto rows = parse_csv_rows(text);
  spec.masks.clear();
  for (const auto& r : rows)
    if (std::find(spec.masks.begin(), spec.masks.end(), r.mask) == spec.masks.end()) spec.masks.push_back(r.mask);
  write_outputs(spec, rows, info, dir);
  // Say plainly that nothing was measured: the numbers are the old sweep's.
  std::fprintf(stderr,
               "bench overlap: re-analysed the existing sweep in %s (not re-measured; the sweep took %.0f s, link: %s);\n"
               "  replot took %.2f s; rewrote overlap.{csv,jsonl} and overlap-<mask>.svg there\n",
               dir.string().c_str(), info.seconds, info.link.c_str(),
               std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
}

}  // namespace

int ringattn::cli::bench_overlap_main(const std::vector<std::string>& argv) {
  Args a("bench overlap",
         "Sweeps the block size b on a ring of P member processes and measures per ring step: the kernel\n"
         "alone (T_c), the transfer alone (T_x), both in series and the double-buffered step (T_overlap),\n"
         "with F, B and the transport's CPU seconds per byte. Finds the measured crossover T_c = T_x and\n"
         "compares it with b* = d_kv·s·F/(2·d·B). Writes CSV, JSON lines and an SVG plot per mask.\n"
         "On shaped links between network namespaces: deploy/netns/testbed.sh.");
  declare(a);
  if (!a.parse(argv)) return 0;
  if (auto dir = a.maybe("replot")) return replot(*dir);
  const SweepSpec spec = spec_from(a);
  if (a.has("nice") && !a.has("worker")) set_priority(a.integer("nice", -20, 19));
  if (auto b = a.maybe("measure-flops")) {
    std::printf("%.6g\n", measure_flops(spec, cli::parse_count(*b, "--measure-flops")));
    return 0;
  }
  if (a.has("worker")) {
    MemberNet mn;
    mn.rank = a.integer("rank", 0, spec.nodes - 1);
    mn.peers = a.str("peers");
    mn.ring_id = a.integer<std::uint64_t>("ring-id", 0, INT64_MAX);
    mn.listen = a.str("listen");
    try {
      run_member(spec, mn);
    } catch (const std::exception& e) {  // the launcher reads the structured report
      node::emit_line(node::fail_line(node::fail_report_for(e, mn.rank)));
      throw;
    }
    return 0;
  }
  return front(a, spec, argv);
}
