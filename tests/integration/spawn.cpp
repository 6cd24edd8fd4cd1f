#include "tests/integration/spawn.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace ringattn::itest {

namespace {

using clock = std::chrono::steady_clock;

double since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

// Owns the process group: SIGKILLs whatever is left of it on scope exit.
struct GroupGuard {
  pid_t pgid = -1;
  ~GroupGuard() {
    if (pgid > 0) ::kill(-pgid, SIGKILL);
  }
};

// True once no process of the group exists. Processes the coordinator reaped are gone
// at once; an orphan reparented to init may need a moment to be reaped.
bool wait_group_empty(pid_t pgid, double seconds) {
  const auto t0 = clock::now();
  while (true) {
    if (::kill(-pgid, 0) != 0 && errno == ESRCH) return true;
    if (since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void drain(int fd, std::string& into) {
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return;
    into.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

std::vector<std::string> Outcome::error_lines() const {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < err.size()) {
    auto end = err.find('\n', start);
    if (end == std::string::npos) end = err.size();
    std::string line = err.substr(start, end - start);
    if (!line.empty() && line[0] != '[') lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

const std::string& ringattn_exe() {
  static const std::string exe = [] {
    const char* e = std::getenv("RINGATTN_EXE");
    if (!e || !*e) throw std::runtime_error("RINGATTN_EXE is not set (run the integration tests with meson test)");
    return std::string(e);
  }();
  return exe;
}

Outcome run_ringattn(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
                     double deadline_seconds) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  std::vector<std::string> argv_s = {ringattn_exe()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  // The environment is built before fork: the child may only call async-signal-safe functions.
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    bool overridden = false;
    for (const auto& [k, v] : env) overridden |= kv.rfind(k + "=", 0) == 0;
    if (!overridden) env_s.push_back(kv);
  }
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);

  const auto t0 = clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also in the parent, so the group exists before either runs on
  GroupGuard guard{pid};
  ::close(out[1]);
  ::close(err[1]);
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);

  Outcome o;
  int status = 0;
  bool exited = false;
  while (!exited) {
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    ::poll(fds, 2, 20);
    drain(out[0], o.out);
    drain(err[0], o.err);
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!exited && since(t0) > deadline_seconds) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      o.timed_out = true;
      exited = true;
    }
  }
  o.wall_seconds = since(t0);
  if (o.timed_out) o.exit_code = -1;
  else if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) o.exit_code = 128 + WTERMSIG(status);
  o.group_empty = wait_group_empty(pid, 1.0);
  // Nodes that outlived the coordinator may still hold the pipes open: read what is
  // there without waiting for EOF.
  drain(out[0], o.out);
  drain(err[0], o.err);
  ::close(out[0]);
  ::close(err[0]);
  return o;
}

}  // namespace ringattn::itest
