#include "src/run/coordinator.hpp"

#include <poll.h>
#include <unistd.h>

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

#include "net/secret.hpp"
#include "ringattn/error.hpp"
#include "ringattn/log.hpp"
#include "src/io/npy_reader.hpp"
#include "src/io/npy_writer.hpp"
#include "src/run/child_process.hpp"

namespace ringattn::run {

namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

constexpr double kSurvivorGraceSeconds = 1.5;

// A node's last stderr line is "ringattn node: error: rank R: <cause>"; the run's own
// error already says "rank R failed", so keep only the cause.
std::string node_cause(std::string line, int rank) {
  for (const std::string& prefix : {std::string("ringattn node: error: "), "rank " + std::to_string(rank) + ": "})
    if (line.rfind(prefix, 0) == 0) line.erase(0, prefix.size());
  return line;
}

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find the ringattn executable (/proc/self/exe): " + ec.message());
  return p.string();
}

// Removes the work directory however the run ends.
struct WorkDir {
  fs::path path;
  explicit WorkDir(const std::string& out_path) {
    fs::path dir = fs::path(out_path).parent_path();
    if (dir.empty()) dir = ".";
    std::string tmpl = (dir / ".ringattn-run-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      throw FileError(dir.string() + ": cannot create a work directory next to the output (" + std::strerror(errno) + ")");
    path = tmpl;
  }
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

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

std::vector<std::string> split_words(const std::string& s, int rank) {
  std::vector<std::string> out;
  std::istringstream is(s);
  std::string w;
  while (is >> w) {
    for (auto at = w.find("{rank}"); at != std::string::npos; at = w.find("{rank}")) w.replace(at, 6, std::to_string(rank));
    out.push_back(w);
  }
  return out;
}

void assemble(const node::JobSpec& job, const fs::path& dir, const std::string& path, const char* part,
              std::vector<std::int64_t> shape) {
  io::NpyAtomicWriter w(path, std::move(shape));
  for (int r = 0; r < job.nodes; ++r) {
    const auto shard = io::read_npy((dir / ("rank" + std::to_string(r) + "." + part + ".npy")).string());
    const auto rows = ring::shard_positions(job.layout, job.tokens, job.nodes, r).materialize();
    w.write_rows(rows, shard.data);
  }
  w.commit();
}

}  // namespace

RunResult run_ring(const node::JobSpec& job, const RunOptions& opts) {
  auto log = logger("run");
  WorkDir work(opts.out_path);
  if (!opts.hosts.empty() && static_cast<int>(opts.hosts.size()) != job.nodes)
    throw InvalidArgument("--hosts lists " + std::to_string(opts.hosts.size()) + " addresses but --nodes is " +
                          std::to_string(job.nodes));
  // One fresh secret per run unless the operator set one; the nodes inherit it.
  if (!std::getenv(net::kTokenEnv)) ::setenv(net::kTokenEnv, net::generate_secret().c_str(), 1);
  std::uint64_t ring_id = 0;
  net::fill_random(std::span<std::byte>(reinterpret_cast<std::byte*>(&ring_id), sizeof ring_id));
  ring_id >>= 1;  // keep it positive for the CLI parser

  const std::string exe = self_exe();
  std::string peer_list;
  for (std::size_t i = 0; i < opts.hosts.size(); ++i) peer_list += (i ? "," : "") + opts.hosts[i];
  const auto start = clock::now();
  std::vector<std::unique_ptr<ChildProcess>> kids;
  for (int r = 0; r < job.nodes; ++r) {
    std::vector<std::string> args = split_words(opts.launch_prefix, r);
    std::string prog = exe;
    if (!args.empty()) {
      prog = args.front();
      args.erase(args.begin());
      args.push_back(exe);
    }
    args.insert(args.end(), {"node", "--rank", std::to_string(r)});
    const auto ja = node::job_arguments(job);
    args.insert(args.end(), ja.begin(), ja.end());
    args.insert(args.end(), {"--out-dir", work.path.string(), "--ring-id", std::to_string(ring_id)});
    if (opts.hosts.empty()) {
      args.insert(args.end(), {"--peers", "-"});
    } else {
      args.insert(args.end(), {"--peers", peer_list, "--listen", opts.hosts[static_cast<std::size_t>(r)]});
    }
    if (prog != exe && prog.find('/') == std::string::npos) {
      // A launcher named without a path: resolve it like a shell would.
      for (const char* d : {"/usr/sbin/", "/usr/bin/", "/sbin/", "/bin/"})
        if (::access((std::string(d) + prog).c_str(), X_OK) == 0) {
          prog = std::string(d) + prog;
          break;
        }
    }
    kids.push_back(std::make_unique<ChildProcess>(prog, args));
  }

  std::vector<std::optional<std::uint16_t>> ports(static_cast<std::size_t>(job.nodes));
  std::vector<std::string> last_err(static_cast<std::size_t>(job.nodes));
  std::vector<std::optional<NodeStats>> stats(static_cast<std::size_t>(job.nodes));
  bool peers_sent = !opts.hosts.empty();  // with --hosts every node already has the list
  int first_failed = -1;
  int first_code = 0;
  auto after = [](double seconds) {
    return clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
  };
  const auto backstop = after(job.timeout_seconds * (job.nodes + 2) + 10);
  auto kill_at = clock::time_point::max();

  auto drain = [&](int r) {
    auto& k = *kids[static_cast<std::size_t>(r)];
    for (auto& line : k.read_lines(k.stdout_fd())) {
      if (line.rfind("PORT ", 0) == 0) ports[static_cast<std::size_t>(r)] = static_cast<std::uint16_t>(std::atoi(line.c_str() + 5));
      else if (line.rfind("STATS ", 0) == 0) stats[static_cast<std::size_t>(r)] = parse_stats(line.substr(6));
    }
    for (auto& line : k.read_lines(k.stderr_fd())) {
      if (!opts.quiet) std::fprintf(stderr, "%s\n", line.c_str());
      if (!line.empty()) last_err[static_cast<std::size_t>(r)] = line;
    }
  };

  while (true) {
    std::vector<pollfd> fds;
    for (auto& k : kids) {
      fds.push_back({k->stdout_fd(), POLLIN, 0});
      fds.push_back({k->stderr_fd(), POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 50);
    bool all_done = true;
    for (int r = 0; r < job.nodes; ++r) {
      drain(r);
      auto& k = *kids[static_cast<std::size_t>(r)];
      if (auto code = k.poll_exit()) {
        drain(r);
        if (*code != 0 && first_failed < 0) {
          first_failed = r;
          first_code = *code;
          // Survivors learn of the failure from their sockets (EOF, or the ERROR frame the
          // failing node sends) within milliseconds and exit with their own error. One that
          // is still running after a short grace is stuck — typically the hung or silent
          // peer whose silence made this node time out — and is killed, so a failed job
          // ends within its timeout plus the grace, not twice the timeout.
          kill_at = after(kSurvivorGraceSeconds);
        }
      } else {
        all_done = false;
      }
    }
    if (!peers_sent && std::all_of(ports.begin(), ports.end(), [](auto& p) { return p.has_value(); })) {
      std::string line = "PEERS ";
      for (int r = 0; r < job.nodes; ++r) line += (r ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(*ports[static_cast<std::size_t>(r)]);
      for (auto& k : kids) k->send_line_and_close(line);
      peers_sent = true;
    }
    if (all_done) break;
    const auto now = clock::now();
    if (now > kill_at || now > backstop) {
      for (int r = 0; r < job.nodes; ++r) {
        auto& k = *kids[static_cast<std::size_t>(r)];
        if (!k.running()) continue;
        log->error("rank {} still running {:.1f} s after rank {} failed; killing it", r, kSurvivorGraceSeconds,
                   first_failed);
        k.kill_now();
        if (first_failed < 0) {
          first_failed = r;
          first_code = 128 + 9;
          last_err[static_cast<std::size_t>(r)] = "did not finish within the run's deadline";
        }
      }
    }
  }
  RunResult res;
  res.wall_seconds = std::chrono::duration<double>(clock::now() - start).count();
  if (first_failed >= 0) {
    std::string why = node_cause(last_err[static_cast<std::size_t>(first_failed)], first_failed);
    if (why.empty()) why = "no error message";
    throw Error("rank " + std::to_string(first_failed) + " failed (exit " + std::to_string(first_code) + "): " + why);
  }
  for (auto& s : stats) {
    if (!s) throw Error("a node exited 0 without reporting STATS");
    res.ring_seconds = std::max(res.ring_seconds, s->total_seconds);
    res.nodes.push_back(*s);
  }
  const auto& c = job.attention;
  assemble(job, work.path, opts.out_path, "o", {job.tokens, c.heads, c.head_dim});
  if (!opts.lse_path.empty()) assemble(job, work.path, opts.lse_path, "lse", {job.tokens, c.heads});
  return res;
}

}  // namespace ringattn::run
