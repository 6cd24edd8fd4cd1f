#include "tests/integration/spawn.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace ringattn::itest {

namespace {

using clock = std::chrono::steady_clock;

double since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

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

Spawned::Spawned(const std::vector<std::string>& args, const Env& env, const std::string& exe) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  std::vector<std::string> argv_s = {exe};
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

  started_ = clock::now();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);  // also in the parent, so the group exists before either runs on
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  ::fcntl(err_fd_, F_SETFL, O_NONBLOCK);
}

Spawned::~Spawned() {
  if (pid_ > 0) ::kill(-pid_, SIGKILL);
  if (!exited_) ::waitpid(pid_, &status_, 0);
  ::close(out_fd_);
  ::close(err_fd_);
}

bool Spawned::pump() {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  ::poll(fds, 2, 20);
  drain(out_fd_, o_.out);
  drain(err_fd_, o_.err);
  if (!exited_) exited_ = ::waitpid(pid_, &status_, WNOHANG) == pid_;
  return !exited_;
}

Outcome Spawned::wait(double deadline_seconds) {
  const auto t0 = started_;
  while (pump()) {
    if (since(t0) > deadline_seconds) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      exited_ = true;
      o_.timed_out = true;
    }
  }
  o_.wall_seconds = since(t0);
  if (o_.timed_out) o_.exit_code = -1;
  else if (WIFEXITED(status_)) o_.exit_code = WEXITSTATUS(status_);
  else if (WIFSIGNALED(status_)) o_.exit_code = 128 + WTERMSIG(status_);
  o_.group_empty = wait_group_empty(pid_, 2.0);
  // Nodes that outlived the coordinator may still hold the pipes open: read what is
  // there without waiting for EOF.
  drain(out_fd_, o_.out);
  drain(err_fd_, o_.err);
  return o_;
}

Outcome run_ringattn(const std::vector<std::string>& args, const Env& env, double deadline_seconds) {
  Spawned p(args, env);
  return p.wait(deadline_seconds);
}

std::vector<std::pair<pid_t, int>> node_processes(pid_t run_pid) {
  std::vector<std::pair<pid_t, int>> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid != run_pid || state == 'Z') continue;
    std::ifstream cmd(entry.path() / "cmdline");
    std::vector<std::string> argv;
    for (std::string a; std::getline(cmd, a, '\0');) argv.push_back(a);
    for (std::size_t i = 1; i + 2 < argv.size(); ++i)
      if (argv[i] == "node" && argv[i + 1] == "--rank") out.emplace_back(std::stoi(name), std::stoi(argv[i + 2]));
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.second < b.second; });
  return out;
}

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' && line[close + 2] != 'X';
}

}  // namespace ringattn::itest
