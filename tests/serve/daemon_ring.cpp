#include "tests/serve/daemon_ring.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <sys/stat.h>

namespace ringattn::stest {

DaemonRing::DaemonRing(const RingConfig& c) : config_(c) {
  token_file_ = dir_.file("token");
  {
    std::ofstream f(token_file_);
    f << "daemon-test-token-0123456789abcdef\n";
  }
  ::chmod(token_file_.c_str(), 0600);
  // free_port() only says a port was free a moment ago, and may say so of the same port
  // twice: the ring's ports must at least differ from each other.
  std::vector<int> taken;
  auto distinct_port = [&] {
    for (;;) {
      const int p = itest::free_port();
      if (std::find(taken.begin(), taken.end(), p) == taken.end()) {
        taken.push_back(p);
        return p;
      }
    }
  };
  master_ = distinct_port();
  for (int r = 0; r < c.world; ++r) {
    control_.push_back(distinct_port());
    metrics_.push_back(distinct_port());
  }
  daemons_.resize(static_cast<std::size_t>(c.world));
  for (int r = 0; r < c.world; ++r) start(r);
}

DaemonRing::~DaemonRing() = default;  // each Spawned SIGKILLs its group

void DaemonRing::start(int rank) {
  std::vector<std::string> args = {"serve",
                                   "--rank", std::to_string(rank),
                                   "--world-size", std::to_string(config_.world),
                                   "--master", "127.0.0.1:" + std::to_string(master_),
                                   "--listen", "127.0.0.1",
                                   "--control", control(rank),
                                   "--metrics", metrics(rank),
                                   "--token-file", token_file_,
                                   "--threads", "1",
                                   "--timeout", std::to_string(config_.timeout),
                                   "--grace", std::to_string(config_.grace)};
  args.insert(args.end(), config_.extra.begin(), config_.extra.end());
  if (static_cast<std::size_t>(rank) < config_.rank_extra.size()) {
    const auto& more = config_.rank_extra[static_cast<std::size_t>(rank)];
    args.insert(args.end(), more.begin(), more.end());
  }
  // The log goes to a file (appended across restarts), not a pipe the test would have to
  // keep drained; `exec` keeps the daemon's pid the one the fixture signals.
  std::vector<std::string> sh = {"-c", "exec \"$0\" \"$@\" 2>>" + log_file(rank), itest::ringattn_exe()};
  sh.insert(sh.end(), args.begin(), args.end());
  auto& slot = daemons_[static_cast<std::size_t>(rank)];
  slot.reset();
  itest::Env env{{"OMP_NUM_THREADS", "1"}};
  env.insert(env.end(), config_.daemon_env.begin(), config_.daemon_env.end());
  slot = std::make_unique<itest::Spawned>(sh, env, "/bin/sh");
}

void DaemonRing::set_rank_extra(int rank, std::vector<std::string> args) {
  if (config_.rank_extra.size() <= static_cast<std::size_t>(rank)) config_.rank_extra.resize(static_cast<std::size_t>(rank) + 1);
  config_.rank_extra[static_cast<std::size_t>(rank)] = std::move(args);
}

void DaemonRing::signal(int rank, int sig) { ::kill(daemons_[static_cast<std::size_t>(rank)]->pid(), sig); }

pid_t DaemonRing::pid(int rank) const { return daemons_[static_cast<std::size_t>(rank)]->pid(); }

itest::Outcome DaemonRing::stop(int rank, double deadline) { return daemons_[static_cast<std::size_t>(rank)]->wait(deadline); }

bool DaemonRing::running(int rank) { return daemons_[static_cast<std::size_t>(rank)]->pump(); }

std::string DaemonRing::log(int rank) {
  std::ifstream f(log_file(rank));
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string DaemonRing::logs(std::size_t tail) {
  std::string all;
  for (int r = 0; r < config_.world; ++r) {
    const std::string l = log(r);
    all += "\n--- rank " + std::to_string(r) + " log" + (l.size() > tail ? " (its last " + std::to_string(tail) + " bytes)" : "") +
           ":\n" + (l.size() > tail ? l.substr(l.size() - tail) : l);
  }
  return all;
}

bool DaemonRing::wait_ready(double seconds) {
  std::vector<std::string> args = {"status", "--to", control(0), "--wait", std::to_string(seconds)};
  args.insert(args.end(), config_.client.begin(), config_.client.end());
  auto o = itest::run_ringattn(args, env(), seconds + 30);
  for (auto& d : daemons_) d->pump();
  if (o.exit_code != 0) {
    std::fprintf(stderr, "status --wait failed: %s\n", o.err.c_str());
    for (int r = 0; r < config_.world; ++r) std::fprintf(stderr, "rank %d log:\n%s\n", r, log(r).c_str());
  }
  return o.exit_code == 0;
}

std::vector<std::string> DaemonRing::submit_args(int to_rank, const std::string& in_dir,
                                                 const std::vector<std::string>& extra) const {
  std::vector<std::string> a = {"submit", "--to", control(to_rank), "--q", in_dir + "/q.npy", "--k", in_dir + "/k.npy",
                                "--v", in_dir + "/v.npy", "--out", in_dir + "/o.npy", "--lse", in_dir + "/lse.npy",
                                "--timeout", "30"};
  a.insert(a.end(), config_.client.begin(), config_.client.end());
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::pair<int, std::string> http_get(const std::string& address, const std::string& path) {
  const auto colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return {0, ""};
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  if (resp.rfind("HTTP/1.1 ", 0) != 0) return {0, resp};
  const auto body = resp.find("\r\n\r\n");
  return {std::stoi(resp.substr(9, 3)), body == std::string::npos ? "" : resp.substr(body + 4)};
}

long rss_kib(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  std::fclose(f);
  return kib;
}

double metric(const DaemonRing& r, int rank, const std::string& series) {
  const auto [code, text] = http_get(r.metrics(rank), "/metrics");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return 0;
}

bool eventually(const std::function<bool()>& pred, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

}  // namespace ringattn::stest
