#include "child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ringattn/error.hpp"

namespace ringattn::run {

namespace {
void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}
}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string ExitStatus::describe() const {
  if (signal != 0) return "killed by signal " + std::to_string(signal) + " (" + signal_name(signal) + ")";
  return "exit " + std::to_string(code);
}

ChildProcess::ChildProcess(const std::string& exe, const std::vector<std::string>& args) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw Error(std::string("cannot create pipes for a node process: ") + std::strerror(errno));
  std::vector<std::string> argv_s = {exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw Error(std::string("cannot fork a node process: ") + std::strerror(errno));
  if (pid_ == 0) {
    // Die with the coordinator, and do not miss it if it died before this line ran.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execv(exe.c_str(), argv.data());
    const char msg[] = "ringattn: exec of the node process failed\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  in_fd_ = in[1];
  out_fd_ = out[0];
  err_fd_ = err[0];
  ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  ::fcntl(err_fd_, F_SETFL, O_NONBLOCK);
}

ChildProcess::~ChildProcess() {
  if (running()) kill_now();
  close_fd(in_fd_);
  close_fd(out_fd_);
  close_fd(err_fd_);
}

bool ChildProcess::send_line(const std::string& line) {
  if (in_fd_ < 0) return false;
  const std::string data = line + "\n";
  std::size_t done = 0;
  ::signal(SIGPIPE, SIG_IGN);  // a child that already died must not kill the coordinator
  while (done < data.size()) {
    const ssize_t n = ::write(in_fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // the child is gone; its exit status will tell why
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void ChildProcess::close_stdin() { close_fd(in_fd_); }

std::vector<std::string> ChildProcess::read_lines(int fd) {
  std::string& buf = fd == out_fd_ ? out_buf_ : err_buf_;
  char chunk[4096];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
  }
  std::vector<std::string> lines;
  std::size_t pos;
  while ((pos = buf.find('\n')) != std::string::npos) {
    lines.push_back(buf.substr(0, pos));
    buf.erase(0, pos + 1);
  }
  return lines;
}

std::optional<ExitStatus> ChildProcess::poll_exit() {
  while (!exit_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (r != pid_) break;
    if (WIFSTOPPED(status)) {
      stop_signal_ = WSTOPSIG(status);
    } else if (WIFCONTINUED(status)) {
      stop_signal_ = 0;
    } else {
      ExitStatus e;
      if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
      else if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      else e.code = 255;
      exit_ = e;
      stop_signal_ = 0;
    }
  }
  return exit_;
}

void ChildProcess::kill_now() {
  if (!running()) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  ExitStatus e;
  e.signal = SIGKILL;
  e.by_us = true;
  exit_ = e;
  stop_signal_ = 0;
}

}  // namespace ringattn::run
