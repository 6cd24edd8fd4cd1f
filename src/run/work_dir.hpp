// ringattn — the job's scratch directory next to the output (the nodes write their
// shards into it), removed however `ringattn run` ends: by the destructor on any return
// or exception, and by a small guard process when the coordinator itself dies (kill -9,
// OOM killer): the guard waits on a pipe from the coordinator, and when the pipe ends
// without a "done", it kills the nodes it was told about and removes the directory.
#pragma once

#include <sys/types.h>

#include <string>

namespace ringattn::run {

class WorkDir {
 public:
  // Creates "<dir of out_path>/.ringattn-run-XXXXXX" and starts the guard. Call before
  // starting the nodes (the guard must hold no pipe of theirs).
  explicit WorkDir(const std::string& out_path);
  ~WorkDir();  // removes the directory, releases the guard
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;

  const std::string& path() const { return path_; }
  // A process the guard must kill if the coordinator dies.
  void guard_process(pid_t pid);

 private:
  std::string path_;
  int guard_fd_ = -1;    // write end of the pipe to the guard
  pid_t guard_pid_ = -1;
};

}  // namespace ringattn::run
