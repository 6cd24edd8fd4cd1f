// ringattn — a child process with pipes on stdin, stdout and stderr, read line by line
// without blocking, so one coordinator thread can watch P nodes under one deadline.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace ringattn::run {

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

  // Writes a line to the child's stdin and closes it.
  void send_line_and_close(const std::string& line);

  // Reads what is available on fd (stdout or stderr) and returns the complete lines.
  std::vector<std::string> read_lines(int fd);

  // Non-blocking reap: the exit status once the child has ended (exit code, or
  // 128 + signal number).
  std::optional<int> poll_exit();
  void kill_now();
  bool running() const { return !exit_.has_value(); }

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1;
  std::string out_buf_, err_buf_;
  std::optional<int> exit_;
};

}  // namespace ringattn::run
