#include "launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "../cli/log.hpp"
#include "ringattn/error.hpp"
#include "../cli/commands.hpp"
#include "child_process.hpp"
#include "root_cause.hpp"
#include "work_dir.hpp"

namespace ringattn::run {

namespace {

using clock = std::chrono::steady_clock;

constexpr double kSurvivorGraceSeconds = 1.5;

// SIGINT, SIGTERM and SIGHUP, turned into a readable pipe for the poll loop while the
// ranks run; the previous handlers come back afterwards.
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

// A launcher named without a path: resolve it like a shell would.
std::string resolve(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return prog;
  for (const char* d : {"/usr/local/bin/", "/usr/sbin/", "/usr/bin/", "/sbin/", "/bin/"})
    if (::access((std::string(d) + prog).c_str(), X_OK) == 0) return std::string(d) + prog;
  return prog;
}

// What the launcher knows of one rank while it runs.
struct Rank {
  std::unique_ptr<ChildProcess> proc;
  std::optional<std::string> stats;
  std::optional<node::Ident> ident;
  std::optional<node::FailReport> report;
  std::string last_error;
  std::string alive;  // the last ALIVE value
  int stop_signal = 0;
  clock::time_point stopped_since;
};

}  // namespace

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find the ringattn executable (/proc/self/exe): " + ec.message());
  return p.string();
}

namespace {

// One launch: the ranks started, then watched until all end (their lines read as they
// come: progress, stats, identities, failure reports), a failed or stuck ring stopped.
class Launch {
 public:
  explicit Launch(const LaunchSpec& spec)
      : spec_(spec), ranks_(static_cast<std::size_t>(spec.ranks)),
        // The ranks' own deadlines end a stuck ring within about the timeout; this only
        // catches what they cannot see, and it waits for progress, not for a guessed total.
        backstop_seconds_(std::max(2 * spec.timeout_seconds, spec.timeout_seconds + 10)) {}

  std::vector<std::string> run() {
    start();
    while (!poll_once()) {
    }
    if (failed_) throw Error(root_cause());
    std::vector<std::string> stats;
    for (const Rank& n : ranks_) stats.push_back(n.stats.value_or(""));
    return stats;
  }

 private:
  void start() {
    const std::string exe = self_exe();
    for (int r = 0; r < spec_.ranks; ++r) {
      std::vector<std::string> args = split_words(spec_.launch_prefix, r);
      std::string prog = exe;
      if (!args.empty()) {
        prog = resolve(args.front());
        args.erase(args.begin());
        args.push_back(exe);
      }
      const auto own = spec_.arguments(r);
      args.insert(args.end(), own.begin(), own.end());
      Rank& n = ranks_[static_cast<std::size_t>(r)];
      n.proc = std::make_unique<ChildProcess>(prog, args);
      if (spec_.work) spec_.work->guard_process(n.proc->pid());
      if (!spec_.token.empty()) n.proc->send_line("TOKEN " + spec_.token);
    }
  }

  // A rank's lines so far: its protocol lines kept, the rest passed on (stderr's last kept).
  void drain(Rank& n, int r) {
    ChildProcess& k = *n.proc;
    for (auto& line : k.read_lines(k.stdout_fd())) {
      if (line.rfind("ALIVE ", 0) == 0) {
        if (line == n.alive) continue;  // the same count again: alive, but no progress
        n.alive = line;
      } else if (line.rfind("STATS ", 0) == 0) {
        n.stats = line.substr(6);
      } else if (line.rfind("IDENT ", 0) == 0) {
        n.ident = node::parse_ident(line.substr(6));
      } else if (line.rfind("FAIL ", 0) == 0) {
        n.report = node::parse_fail(line.substr(5));
      } else if (spec_.on_line) {
        spec_.on_line(r, line);
      }
      last_progress_ = clock::now();
    }
    for (auto& line : k.read_lines(k.stderr_fd())) {
      if (!spec_.quiet) std::fprintf(stderr, "%s\n", line.c_str());
      if (!line.empty()) n.last_error = line;
    }
  }

  // One wait of at most 50 ms for output or a signal, then every rank's state; true once
  // every rank has ended.
  bool poll_once() {
    std::vector<pollfd> fds;
    for (const Rank& n : ranks_) {
      fds.push_back({n.proc->stdout_fd(), POLLIN, 0});
      fds.push_back({n.proc->stderr_fd(), POLLIN, 0});
    }
    fds.push_back({signals_.fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 50);
    if (const int sig = signals_.caught()) {
      for (Rank& n : ranks_) n.proc->kill_now();
      throw cli::Interrupted("interrupted by " + signal_name(sig) + ": stopped the " + std::to_string(spec_.ranks) +
                                 " ranks and removed the work directory; no output was written",
                             sig);
    }
    bool all_done = true;
    for (int r = 0; r < spec_.ranks; ++r) all_done = watch(r) && all_done;
    if (!all_done) stop_if_stuck();
    return all_done;
  }

  // Rank r's output and exit; true if it has ended.
  bool watch(int r) {
    Rank& n = ranks_[static_cast<std::size_t>(r)];
    drain(n, r);
    if (auto e = n.proc->poll_exit()) {
      drain(n, r);
      if ((e->code != 0 || e->signal != 0) && !failed_) {
        failed_ = true;
        // Survivors learn of the failure from the ring (an ERROR frame, or EOF) within
        // moments and exit with their own report. One still running after a short
        // grace is stuck — hung, stopped, or waiting on one that is — and is killed.
        kill_at_ = clock::now() + std::chrono::milliseconds(static_cast<int>(kSurvivorGraceSeconds * 1000));
      }
      return true;
    }
    const int stop = n.proc->stop_signal();
    if (stop != 0 && n.stop_signal == 0) n.stopped_since = clock::now();
    n.stop_signal = stop;
    // A rank stopped for longer than the timeout is lost to the ring, whether or not
    // a neighbour is waiting on it right now.
    if (stop != 0 && !failed_ && std::chrono::duration<double>(clock::now() - n.stopped_since).count() > spec_.timeout_seconds) {
      failed_ = true;
      kill_at_ = clock::now();
    }
    return false;
  }

  // Past the survivors' grace, or without progress for the backstop: the living ranks killed.
  void stop_if_stuck() {
    const auto now = clock::now();
    const bool stalled = std::chrono::duration<double>(now - last_progress_).count() > backstop_seconds_;
    if (now <= kill_at_ && !stalled) return;
    if (stalled && !failed_) {
      backstop_note_ = "no rank reported progress for " + std::to_string(static_cast<int>(backstop_seconds_)) + " s";
      cli::logger("run")->error("{}; stopping the job", backstop_note_);
      failed_ = true;
    }
    for (Rank& n : ranks_) {
      if (!n.proc->running()) continue;
      n.stop_signal = n.proc->stop_signal();
      n.proc->kill_now();
      if (n.last_error.empty()) n.last_error = backstop_note_.empty() ? "still running after the others had failed" : backstop_note_;
    }
  }

  std::string root_cause() const {
    std::vector<NodeEnd> ends;
    for (int r = 0; r < spec_.ranks; ++r) {
      const Rank& n = ranks_[static_cast<std::size_t>(r)];
      ends.push_back({r, n.proc->poll_exit(), n.stop_signal, n.ident, n.report, n.last_error});
    }
    RootCause why = find_root_cause(ends, spec_.expected, spec_.timeout_seconds);
    if (!backstop_note_.empty() && why.rank < 0) why.message = backstop_note_;
    return why.message;
  }

  const LaunchSpec& spec_;
  SignalWatch signals_;
  std::vector<Rank> ranks_;
  const double backstop_seconds_;
  bool failed_ = false;
  std::string backstop_note_;
  clock::time_point last_progress_ = clock::now();
  clock::time_point kill_at_ = clock::time_point::max();
};

}  // namespace

std::vector<std::string> launch(const LaunchSpec& spec) { return Launch(spec).run(); }

}  // namespace ringattn::run
