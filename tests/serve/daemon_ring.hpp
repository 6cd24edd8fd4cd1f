// Daemon tests — a ring of real `ringattn serve` processes on loopback (free ports only),
// driven through the real `ringattn submit` and `status`, outputs checked against the
// float64 dense reference. Every daemon runs in its own process group that the fixture
// SIGKILLs when it goes, also when a test fails half-way.
#pragma once

#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/integration/ring_case.hpp"
#include "tests/integration/spawn.hpp"

namespace ringattn::stest {

using itest::Outcome;
using itest::ScratchDir;

struct RingConfig {
  int world = 3;
  // The daemons' --timeout: silence or stall of a peer mid-job. 10 s for the cases that do
  // not test the deadline itself (those set 3): at 3 s a loaded CI machine once went 3 s
  // without a keep-alive from rank 0 during a 48 MiB upload, and a job failed as "silent".
  double timeout = 10;
  double grace = 30;
  std::vector<std::string> extra;   // more serve options, for every daemon
  std::vector<std::string> client;  // more options for every submit and status (e.g. --tls)
  std::vector<std::vector<std::string>> rank_extra;  // more serve options for rank r (index r), after `extra`
  itest::Env daemon_env;  // more environment for every daemon
};

class DaemonRing {
 public:
  explicit DaemonRing(const RingConfig& c);
  ~DaemonRing();  // SIGKILLs every daemon still running

  void start(int rank);                       // (re)starts daemon `rank`
  void set_rank_extra(int rank, std::vector<std::string> args);  // for its next start()
  void signal(int rank, int sig);             // to the daemon's process
  itest::Outcome stop(int rank, double deadline);  // waits for it to exit
  bool running(int rank);
  pid_t pid(int rank) const;
  // `ringattn status --wait S` until every daemon reports the ring ready.
  bool wait_ready(double seconds);

  std::string control(int rank) const { return "127.0.0.1:" + std::to_string(control_[static_cast<std::size_t>(rank)]); }
  std::string metrics(int rank) const { return "127.0.0.1:" + std::to_string(metrics_[static_cast<std::size_t>(rank)]); }
  const std::string& token_file() const { return token_file_; }
  const ScratchDir& dir() const { return dir_; }
  std::string log(int rank);  // what the daemon wrote to stderr so far (all its lives)
  // The last `tail` bytes of every rank's log, headed by its rank: for INFO(ring.logs()) in a
  // test case, which doctest reads only when an assertion fails, so a failure shows its cause.
  std::string logs(std::size_t tail = 4000);
  std::string log_file(int rank) const { return dir_.file("rank" + std::to_string(rank) + ".log"); }
  itest::Env env() const { return {{"RINGATTN_TOKEN_FILE", token_file_}}; }

  // `ringattn submit --to <rank's control> ...` over inputs in `in_dir`, out to o.npy/lse.npy there.
  std::vector<std::string> submit_args(int to_rank, const std::string& in_dir, const std::vector<std::string>& extra) const;

 private:
  RingConfig config_;
  ScratchDir dir_;
  std::string token_file_;
  int master_ = 0;
  std::vector<int> control_, metrics_;
  std::vector<std::unique_ptr<itest::Spawned>> daemons_;
};

// GET http://address/path; returns the status code and body ("" and 0 if unreachable).
std::pair<int, std::string> http_get(const std::string& address, const std::string& path);

// Resident set of a process in KiB (VmRSS), -1 if gone.
long rss_kib(pid_t pid);

// One series (its name and labels as /metrics writes them) of daemon `rank`; 0 if absent.
double metric(const DaemonRing& r, int rank, const std::string& series);

// pred() polled every 100 ms until it holds or `seconds` passed; its last answer.
bool eventually(const std::function<bool()>& pred, double seconds);

}  // namespace ringattn::stest
