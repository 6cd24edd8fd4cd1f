// ringattn — a child process with pipes on stdin, stdout and stderr, read line by line
// without blocking, so one coordinator thread can watch P nodes under one deadline.
//
// The child dies with its parent (PR_SET_PDEATHSIG: SIGKILL when the coordinator
// thread that started it ends), and its stdin stays open until close_stdin(): over a
// launcher such as ssh, where the death signal does not reach, the end of that pipe is
// what tells a node its launcher is gone.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace ringattn::run {

// How a child ended.
struct ExitStatus {
  int code = 0;    // exit code, when signal == 0
  int signal = 0;  // the signal that killed it, or 0
  bool by_us = false;  // killed by kill_now()
  std::string describe() const;  // "exit 1", "killed by signal 9 (SIGKILL)"
};

class ChildProcess {
 public:
  // Starts `exe` with `args` (argv[0] is set to exe). Throws Error if it cannot.
  ChildProcess(const std::string& exe, const std::vector<std::string>& args);
  ~ChildProcess();  // kills (SIGKILL) and reaps if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }

  // Writes a line to the child's stdin (which stays open). False if the child is gone.
  bool send_line(const std::string& line);
  void close_stdin();

  // Reads what is available on fd (stdout or stderr) and returns the complete lines.
  std::vector<std::string> read_lines(int fd);

  // Non-blocking: reaps the child if it ended, notes whether it is stopped (SIGSTOP,
  // SIGTSTP...) or was continued. Returns the exit status once it has ended.
  std::optional<ExitStatus> poll_exit();
  int stop_signal() const { return stop_signal_; }  // 0 unless stopped right now
  void kill_now();                                   // SIGKILL and reap
  bool running() const { return !exit_.has_value(); }

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1;
  std::string out_buf_, err_buf_;
  std::optional<ExitStatus> exit_;
  int stop_signal_ = 0;
};

std::string signal_name(int sig);  // "SIGKILL"

}  // namespace ringattn::run
