#include "work_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "ringattn/error.hpp"

namespace ringattn::run {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxGuarded = 8192;

// The guard runs in a fork of a process that may have had threads, so it uses only
// system calls: no allocation, no stdio, no C++ library that might hold a lock.
void remove_files_raw(int dirfd) {
  alignas(8) char buf[8192];
  for (int pass = 0; pass < 4; ++pass) {
    ::lseek(dirfd, 0, SEEK_SET);
    bool any = false;
    while (true) {
      const long n = ::syscall(SYS_getdents64, dirfd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        const auto* d = reinterpret_cast<const struct dirent64*>(buf + off);
        off += d->d_reclen;
        const char* name = d->d_name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        ::unlinkat(dirfd, name, 0);
        any = true;
      }
    }
    if (!any) return;
  }
}

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

[[noreturn]] void guard_main(int fd, const char* path) {
  // Ctrl-C and kill reach the whole process group; the guard outlives them on purpose
  // and leaves when its pipe ends.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  static pid_t pids[kMaxGuarded];
  int count = 0;
  bool done = false;
  unsigned char msg[5];
  std::size_t have = 0;
  while (true) {
    const ssize_t n = ::read(fd, msg + have, sizeof msg - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<std::size_t>(n);
    if (have < sizeof msg) continue;
    have = 0;
    if (msg[0] == 'D') done = true;
    if (msg[0] == 'P' && count < kMaxGuarded) {
      std::int32_t pid;
      std::memcpy(&pid, msg + 1, sizeof pid);
      pids[count++] = static_cast<pid_t>(pid);
    }
  }
  if (!done) {  // the coordinator died: stop its nodes, then clear the directory
    for (int i = 0; i < count; ++i) ::kill(pids[i], SIGKILL);
    sleep_ms(100);
    for (int round = 0; round < 3; ++round) {
      const int dirfd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dirfd < 0) break;
      remove_files_raw(dirfd);
      ::close(dirfd);
      if (::rmdir(path) == 0) break;
      sleep_ms(500);  // a remote node may still be finishing a write
    }
  }
  ::_exit(0);
}

}  // namespace

WorkDir::WorkDir(const std::string& out_path) {
  fs::path dir = fs::path(out_path).parent_path();
  if (dir.empty()) dir = ".";
  std::string tmpl = (dir / ".ringattn-run-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    throw FileError(dir.string() + ": cannot create a work directory next to the output (" + std::strerror(errno) + ")");
  path_ = fs::absolute(tmpl).string();
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    std::error_code ec;
    fs::remove_all(path_, ec);
    throw Error(std::string("cannot create the work directory's guard pipe: ") + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    std::error_code ec;
    fs::remove_all(path_, ec);
    throw Error(std::string("cannot fork the work directory's guard: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Keep only the read end (as fd 3) and stderr: holding any other pipe of the
    // coordinator's would keep its readers from seeing an end.
    const int keep = p[0] == 3 ? 3 : ::dup2(p[0], 3);
    if (keep != 3) ::_exit(1);
    if (::syscall(SYS_close_range, 4u, ~0u, 0) != 0)
      for (int fd = 4; fd < 4096; ++fd) ::close(fd);
    if (STDIN_FILENO != 3) ::close(STDIN_FILENO);
    if (STDOUT_FILENO != 3) ::close(STDOUT_FILENO);
    ::fcntl(3, F_SETFD, 0);
    guard_main(3, path_.c_str());
  }
  ::close(p[0]);
  guard_fd_ = p[1];
  guard_pid_ = pid;
}

void WorkDir::guard_process(pid_t pid) {
  unsigned char msg[5] = {'P'};
  const std::int32_t v = pid;
  std::memcpy(msg + 1, &v, sizeof v);
  (void)!::write(guard_fd_, msg, sizeof msg);
}

WorkDir::~WorkDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  const unsigned char done[5] = {'D'};
  (void)!::write(guard_fd_, done, sizeof done);
  ::close(guard_fd_);
  int status;
  while (::waitpid(guard_pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace ringattn::run
