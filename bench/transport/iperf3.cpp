// Runs `iperf3 -s -1` and `iperf3 -c ... -J` on a free port and reads the receiver's rate.
#include "iperf3.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

extern char** environ;

namespace ringattn::bench {
namespace {

std::optional<std::uint16_t> free_port(const std::string& host) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1 &&
                  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  return ok ? std::optional<std::uint16_t>(ntohs(a.sin_port)) : std::nullopt;
}

std::optional<double> received_gbps(const std::string& json) {
  const auto at = json.find("\"sum_received\"");
  if (at == std::string::npos) return std::nullopt;
  const auto key = json.find("\"bits_per_second\"", at);
  if (key == std::string::npos) return std::nullopt;
  return std::stod(json.substr(json.find(':', key) + 1)) / 8e9;
}

std::optional<double> one_run(const std::string& host, int seconds, const std::string& len) {
  const auto port = free_port(host);
  if (!port) return std::nullopt;
  const std::string p = std::to_string(*port);
  std::vector<std::string> args = {kIperf3Path, "-s", "-1", "-B", host, "-p", p};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t server = -1;
  const int rc = posix_spawn(&server, kIperf3Path, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return std::nullopt;
  const std::string cmd = std::string(kIperf3Path) + " -c " + host + " -p " + p + " -t " + std::to_string(seconds) +
                          " -l " + len + " -J 2>/dev/null";
  std::optional<double> gbps;
  for (int attempt = 0; attempt < 40 && !gbps; ++attempt) {  // until the server listens
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    FILE* f = ::popen(cmd.c_str(), "r");
    if (!f) break;
    std::string out;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    if (::pclose(f) == 0) gbps = received_gbps(out);
  }
  ::kill(server, SIGTERM);  // our own child; a no-op if it already exited after its one test
  ::waitpid(server, nullptr, 0);
  return gbps;
}

}  // namespace

std::optional<double> iperf3_gbps(const std::string& host, int runs, int seconds, const std::string& write_len) {
  if (::access(kIperf3Path, X_OK) != 0) return std::nullopt;
  std::vector<double> got;
  for (int i = 0; i < runs; ++i)
    if (auto g = one_run(host, seconds, write_len)) got.push_back(*g);
  if (got.empty()) return std::nullopt;
  std::sort(got.begin(), got.end());
  const std::size_t n = got.size();
  return n % 2 ? got[n / 2] : 0.5 * (got[n / 2 - 1] + got[n / 2]);
}

}  // namespace ringattn::bench
