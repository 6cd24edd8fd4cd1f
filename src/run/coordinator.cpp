#include "src/run/coordinator.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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
#include "core/logger.hpp"
#include "src/cli/commands.hpp"
#include "src/io/npy_reader.hpp"
#include "src/io/npy_writer.hpp"
#include "src/node/report.hpp"
#include "src/ring/kv_ring.hpp"
#include "src/node/memory_budget.hpp"
#include "src/run/child_process.hpp"
#include "src/run/output_paths.hpp"
#include "src/run/root_cause.hpp"
#include "src/run/work_dir.hpp"

namespace ringattn::run {

namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

constexpr double kSurvivorGraceSeconds = 1.5;

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find the ringattn executable (/proc/self/exe): " + ec.message());
  return p.string();
}

// SIGINT, SIGTERM and SIGHUP, turned into a readable pipe for the poll loop while a job
// runs; the previous handlers come back afterwards.
class SignalWatch {
 public:
  SignalWatch() {
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
    write_fd_ = fds_[1];
    struct sigaction sa {};
    sa.sa_handler = [](int sig) {
      const unsigned char b = static_cast<unsigned char>(sig);
      const int saved = errno;
      (void)!::write(write_fd_, &b, 1);
      errno = saved;
    };
    ::sigemptyset(&sa.sa_mask);
    for (std::size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalWatch() {
    for (std::size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    write_fd_ = -1;
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  int fd() const { return fds_[0]; }
  int caught() {  // the first signal received, 0 if none
    unsigned char b = 0;
    return ::read(fds_[0], &b, 1) == 1 ? b : 0;
  }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  static inline int write_fd_ = -1;
  int fds_[2] = {-1, -1};
  struct sigaction old_[3] {};
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

// Fills one output from the shards; finished (fsynced) but not yet published.
std::unique_ptr<io::NpyAtomicWriter> assemble(const node::JobSpec& job, const std::string& dir, const std::string& path,
                                              const char* part, std::vector<std::int64_t> shape) {
  auto w = std::make_unique<io::NpyAtomicWriter>(path, std::move(shape), dir);  // a crash leaves it in the work dir
  for (int r = 0; r < job.nodes; ++r) {
    const auto shard = io::read_npy(dir + "/rank" + std::to_string(r) + "." + part + ".npy");
    const auto rows = ring::shard_positions(job.layout, job.tokens, job.nodes, r).materialize();
    w->write_rows(rows, shard.data);
  }
  w->finish();
  return w;
}

// What the coordinator knows of one node while the job runs.
struct Node {
  std::unique_ptr<ChildProcess> proc;
  std::optional<std::uint16_t> port;
  std::optional<NodeStats> stats;
  std::optional<node::Ident> ident;
  std::optional<node::FailReport> report;
  std::string last_error;
  std::string alive;  // the last ALIVE value
  int stop_signal = 0;
  clock::time_point stopped_since;
};

}  // namespace

RunResult run_ring(const node::JobSpec& job, const RunOptions& opts) {
  auto log = logger("run");
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
    const char* env = std::getenv(net::kTokenEnv);
    token = env && *env ? net::checked_secret(env, std::string("environment variable ") + net::kTokenEnv)
                        : net::generate_secret();
  }
  std::uint64_t ring_id = 0;
  net::fill_random(std::span<std::byte>(reinterpret_cast<std::byte*>(&ring_id), sizeof ring_id));
  ring_id >>= 1;  // keep it positive for the CLI parser
  const node::Ident expected{net::shape_fingerprint(ring::ring_job_shape(job.attention, job.layout, job.tokens, job.nodes)),
                             token.empty() ? "" : net::secret_fingerprint(token)};

  SignalWatch signals;
  ::signal(SIGXFSZ, SIG_IGN);  // a file size limit is an error to report (EFBIG), not a crash
  WorkDir work(opts.out_path);
  const std::string exe = self_exe();
  std::string peer_list;
  for (std::size_t i = 0; i < opts.hosts.size(); ++i) peer_list += (i ? "," : "") + opts.hosts[i];
  const auto start = clock::now();
  std::vector<Node> nodes(static_cast<std::size_t>(job.nodes));
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
    args.insert(args.end(), {"--out-dir", work.path(), "--ring-id", std::to_string(ring_id)});
    if (job.nodes > 1) args.insert(args.end(), {"--token-file", "-"});
    if (opts.tls) args.push_back("--tls");
    if (opts.hosts.empty()) {
      args.insert(args.end(), {"--peers", "-"});
    } else {
      args.insert(args.end(), {"--peers", peer_list, "--listen", opts.hosts[static_cast<std::size_t>(r)]});
    }
    if (prog != exe && prog.find('/') == std::string::npos) {
      // A launcher named without a path: resolve it like a shell would.
      for (const char* d : {"/usr/local/bin/", "/usr/sbin/", "/usr/bin/", "/sbin/", "/bin/"})
        if (::access((std::string(d) + prog).c_str(), X_OK) == 0) {
          prog = std::string(d) + prog;
          break;
        }
    }
    auto& n = nodes[static_cast<std::size_t>(r)];
    n.proc = std::make_unique<ChildProcess>(prog, args);
    work.guard_process(n.proc->pid());
    if (job.nodes > 1) n.proc->send_line("TOKEN " + token);
  }

  bool peers_sent = !opts.hosts.empty();  // with --hosts every node already has the list
  bool failed = false;
  std::string backstop_note;
  auto after = [](double seconds) {
    return clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
  };
  // The nodes' own deadlines end a stuck ring within about the timeout; this only
  // catches what they cannot see, and it waits for progress, not for a guessed total.
  const double backstop_seconds = std::max(2 * job.timeout_seconds, job.timeout_seconds + 10);
  auto last_progress = clock::now();
  auto kill_at = clock::time_point::max();

  auto drain = [&](Node& n, int r) {
    auto& k = *n.proc;
    for (auto& line : k.read_lines(k.stdout_fd())) {
      last_progress = clock::now();
      if (line.rfind("PORT ", 0) == 0) n.port = static_cast<std::uint16_t>(std::atoi(line.c_str() + 5));
      else if (line.rfind("STATS ", 0) == 0) n.stats = parse_stats(line.substr(6));
      else if (line.rfind("IDENT ", 0) == 0) n.ident = node::parse_ident(line.substr(6));
      else if (line.rfind("FAIL ", 0) == 0) n.report = node::parse_fail(line.substr(5));
      else if (line.rfind("ALIVE ", 0) == 0) {
        if (line != n.alive) n.alive = line;
        else continue;  // the same count again: alive, but no progress
      }
    }
    for (auto& line : k.read_lines(k.stderr_fd())) {
      if (!opts.quiet) std::fprintf(stderr, "%s\n", line.c_str());
      if (!line.empty()) n.last_error = line;
    }
    (void)r;
  };

  while (true) {
    std::vector<pollfd> fds;
    for (auto& n : nodes) {
      fds.push_back({n.proc->stdout_fd(), POLLIN, 0});
      fds.push_back({n.proc->stderr_fd(), POLLIN, 0});
    }
    fds.push_back({signals.fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 50);
    if (const int sig = signals.caught()) {
      for (auto& n : nodes) n.proc->kill_now();
      throw cli::Interrupted("interrupted by " + signal_name(sig) + ": stopped the " + std::to_string(job.nodes) +
                                 " nodes and removed the work directory; no output was written",
                             sig);
    }
    bool all_done = true;
    for (int r = 0; r < job.nodes; ++r) {
      auto& n = nodes[static_cast<std::size_t>(r)];
      drain(n, r);
      if (auto e = n.proc->poll_exit()) {
        drain(n, r);
        if ((e->code != 0 || e->signal != 0) && !failed) {
          failed = true;
          // Survivors learn of the failure from the ring (an ERROR frame, or EOF) within
          // moments and exit with their own report. One still running after a short
          // grace is stuck — hung, stopped, or waiting on one that is — and is killed.
          kill_at = after(kSurvivorGraceSeconds);
        }
      } else {
        all_done = false;
        const int stop = n.proc->stop_signal();
        if (stop != 0 && n.stop_signal == 0) n.stopped_since = clock::now();
        n.stop_signal = stop;
        // A node stopped for longer than the timeout is lost to the ring, whether or not
        // a neighbour is waiting on it right now.
        if (stop != 0 && !failed &&
            std::chrono::duration<double>(clock::now() - n.stopped_since).count() > job.timeout_seconds) {
          failed = true;
          kill_at = clock::now();
        }
      }
    }
    if (!peers_sent && std::all_of(nodes.begin(), nodes.end(), [](const Node& n) { return n.port.has_value(); })) {
      std::string line = "PEERS ";
      for (int r = 0; r < job.nodes; ++r)
        line += (r ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(*nodes[static_cast<std::size_t>(r)].port);
      for (auto& n : nodes) n.proc->send_line(line);
      peers_sent = true;
    }
    if (all_done) break;
    const auto now = clock::now();
    const bool stalled = std::chrono::duration<double>(now - last_progress).count() > backstop_seconds;
    if (now > kill_at || stalled) {
      if (stalled && !failed) {
        backstop_note = "no node reported progress for " + std::to_string(static_cast<int>(backstop_seconds)) + " s";
        log->error("{}; stopping the job", backstop_note);
        failed = true;
      }
      for (auto& n : nodes) {
        if (!n.proc->running()) continue;
        n.stop_signal = n.proc->stop_signal();
        n.proc->kill_now();
        if (n.last_error.empty()) n.last_error = backstop_note.empty() ? "still running after the others had failed" : backstop_note;
      }
    }
  }
  RunResult res;
  res.wall_seconds = std::chrono::duration<double>(clock::now() - start).count();
  if (failed) {
    std::vector<NodeEnd> ends;
    for (int r = 0; r < job.nodes; ++r) {
      auto& n = nodes[static_cast<std::size_t>(r)];
      ends.push_back({r, n.proc->poll_exit(), n.stop_signal, n.ident, n.report, n.last_error});
    }
    RootCause why = find_root_cause(ends, expected, job.timeout_seconds);
    if (!backstop_note.empty() && why.rank < 0) why.message = backstop_note;
    throw Error(why.message);
  }
  for (int r = 0; r < job.nodes; ++r) {
    auto& n = nodes[static_cast<std::size_t>(r)];
    if (!n.stats) throw Error("rank " + std::to_string(r) + " exited 0 without reporting STATS");
    res.ring_seconds = std::max(res.ring_seconds, n.stats->total_seconds);
    res.nodes.push_back(*n.stats);
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
