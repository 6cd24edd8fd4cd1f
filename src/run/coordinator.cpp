#include "coordinator.hpp"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "../cli/log.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/error.hpp"
#include "../io/npy_reader.hpp"
#include "../io/npy_writer.hpp"
#include "../node/memory_budget.hpp"
#include "../node/report.hpp"
#include "launcher.hpp"
#include "local_rendezvous.hpp"
#include "output_paths.hpp"
#include "work_dir.hpp"

namespace ringattn::run {

namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

double json_number(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return 0;
  return std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

NodeStats parse_stats(const std::string& json) {
  NodeStats s;
  s.json = json;
  s.rank = static_cast<int>(json_number(json, "rank"));
  s.rows = static_cast<std::int64_t>(json_number(json, "rows"));
  s.total_seconds = json_number(json, "total_seconds");
  s.compute_seconds = json_number(json, "compute_seconds");
  s.wait_seconds = json_number(json, "wait_seconds");
  s.useful_flops = json_number(json, "useful_flops");
  s.io_cpu_seconds = json_number(json, "io_cpu_seconds");
  s.bytes_sent = static_cast<std::uint64_t>(json_number(json, "bytes_sent"));
  s.payload_bytes_sent = static_cast<std::uint64_t>(json_number(json, "payload_bytes_sent"));
  s.steps_skipped = static_cast<int>(json_number(json, "steps_skipped"));
  s.max_rss_kib = static_cast<std::int64_t>(json_number(json, "max_rss_kib"));
  return s;
}

// Fills one output from the shards; finished (fsynced) but not yet published.
std::unique_ptr<io::NpyAtomicWriter> assemble(const node::JobSpec& job, const std::string& dir, const std::string& path,
                                              const char* part, std::vector<std::int64_t> shape) {
  auto w = std::make_unique<io::NpyAtomicWriter>(path, std::move(shape), dir);  // a crash leaves it in the work dir
  for (int r = 0; r < job.nodes; ++r) {
    const auto shard = io::read_npy(dir + "/rank" + std::to_string(r) + "." + part + ".npy");
    const auto rows = node::job_shard(job, r).positions.materialize();
    w->write_rows(rows, shard.data);
  }
  w->finish();
  return w;
}

}  // namespace

RunResult run_ring(const node::JobSpec& job, const RunOptions& opts) {
  auto log = cli::logger("run");
  if (!opts.hosts.empty() && static_cast<int>(opts.hosts.size()) != job.nodes)
    throw InvalidArgument("--hosts lists " + std::to_string(opts.hosts.size()) + " addresses but --nodes is " +
                          std::to_string(job.nodes));
  // Before anything runs: the outputs can be published, and the nodes fit in memory.
  check_output_paths(opts.out_path, opts.lse_path, {job.q_path, job.k_path, job.v_path});
  node::check_memory(job, opts.launch_prefix.empty() ? job.nodes : 1, "");
  // One fresh secret per run unless the operator set one. It reaches the nodes on
  // their stdin, never through the environment, so launchers that drop the
  // environment (ssh, env -i) work and other users cannot read it in /proc.
  std::string token;
  if (job.nodes > 1) {
    token = launcher_token();
  }
  const std::uint64_t ring_id = new_ring_id();
  const RingOptions ring = node::ring_options(job, 0);
  const node::Ident expected{ring.fingerprint(),
                             token.empty() ? "" : token_fingerprint(token)};
  // Without --hosts the nodes find each other through a rendezvous served here.
  std::unique_ptr<RendezvousServer> rendezvous;
  if (opts.hosts.empty() && job.nodes > 1)
    rendezvous = serve_local_rendezvous(ring, job.nodes, ring_id, token, job.timeout_seconds);

  ::signal(SIGXFSZ, SIG_IGN);  // a file size limit is an error to report (EFBIG), not a crash
  WorkDir work(opts.out_path);
  std::string peer_list;
  for (std::size_t i = 0; i < opts.hosts.size(); ++i) peer_list += (i ? "," : "") + opts.hosts[i];
  LaunchSpec ls;
  ls.ranks = job.nodes;
  ls.launch_prefix = opts.launch_prefix;
  ls.token = token;
  ls.timeout_seconds = job.timeout_seconds;
  ls.expected = expected;
  ls.quiet = opts.quiet;
  ls.work = &work;
  ls.arguments = [&](int r) {
    std::vector<std::string> args = {"node", "--rank", std::to_string(r)};
    const auto ja = node::job_arguments(job);
    args.insert(args.end(), ja.begin(), ja.end());
    args.insert(args.end(), {"--out-dir", work.path(), "--ring-id", std::to_string(ring_id)});
    if (job.nodes > 1) args.insert(args.end(), {"--token-file", "-"});
    if (opts.tls) args.push_back("--tls");
    if (rendezvous)
      args.insert(args.end(), {"--master", "127.0.0.1:" + std::to_string(rendezvous->port())});
    else if (!opts.hosts.empty())
      args.insert(args.end(), {"--peers", peer_list, "--listen", opts.hosts[static_cast<std::size_t>(r)]});
    return args;
  };
  const auto start = clock::now();
  const std::vector<std::string> stats = launch(ls);
  RunResult res;
  res.wall_seconds = std::chrono::duration<double>(clock::now() - start).count();
  for (int r = 0; r < job.nodes; ++r) {
    if (stats[static_cast<std::size_t>(r)].empty()) throw Error("rank " + std::to_string(r) + " exited 0 without reporting STATS");
    const NodeStats n = parse_stats(stats[static_cast<std::size_t>(r)]);
    res.ring_seconds = std::max(res.ring_seconds, n.total_seconds);
    res.nodes.push_back(n);
  }
  // Both outputs are complete on disk before either is published.
  const auto& c = job.attention;
  auto o = assemble(job, work.path(), opts.out_path, "o", {job.tokens, c.heads, c.head_dim});
  std::unique_ptr<io::NpyAtomicWriter> lse;
  if (!opts.lse_path.empty()) lse = assemble(job, work.path(), opts.lse_path, "lse", {job.tokens, c.heads});
  o->commit();
  if (lse) {
    try {
      lse->commit();
    } catch (...) {
      std::error_code ec;
      fs::remove(opts.out_path, ec);  // all or nothing
      throw;
    }
  }
  return res;
}

}  // namespace ringattn::run
