// Counts the opens of files, as the kernel sees them (an inotify watch per file): a test
// that a load reads each of a model's files once.
#pragma once

#include <sys/inotify.h>
#include <unistd.h>

#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>

namespace ringattn::test {

class FileOpens {
 public:
  FileOpens() : fd_(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) {
    if (fd_ < 0) throw std::runtime_error("inotify_init1 failed");
  }
  ~FileOpens() { ::close(fd_); }
  FileOpens(const FileOpens&) = delete;
  FileOpens& operator=(const FileOpens&) = delete;

  void watch(const std::string& path) {
    const int wd = ::inotify_add_watch(fd_, path.c_str(), IN_OPEN);
    if (wd < 0) throw std::runtime_error("inotify_add_watch " + path + " failed");
    paths_[wd] = path;
    counts_[path] = 0;
  }
  // The opens of each watched file since it was watched.
  const std::map<std::string, int>& counts() {
    alignas(inotify_event) char buf[4096];
    for (ssize_t got; (got = ::read(fd_, buf, sizeof buf)) > 0;)
      for (ssize_t at = 0; at < got;) {
        const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
        if ((e->mask & IN_OPEN) != 0 && paths_.count(e->wd) != 0) ++counts_[paths_[e->wd]];
        at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      }
    return counts_;
  }

 private:
  int fd_;
  std::map<int, std::string> paths_;
  std::map<std::string, int> counts_;
};

}  // namespace ringattn::test
