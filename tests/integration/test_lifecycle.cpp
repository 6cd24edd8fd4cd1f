// Processes, signals and deadlines: what happens to the nodes, the work directory and
// the error message when the coordinator or a node is killed or stopped mid-job, when a
// fold is slow but healthy, and when nodes are launched by hand or through a launcher
// that drops the environment.
//
// Bounds on wall time here are hang guards (a few timeouts), never speed targets: the
// jobs are made long on purpose by a slow fold (RINGATTN_FAULT=<rank>:slow:<step>).
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "tests/integration/ring_case.hpp"

namespace ringattn::itest {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

constexpr double kTimeout = 2;  // the jobs' --timeout

double since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

bool has_work_dir(const ScratchDir& dir) {
  for (const auto& e : fs::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind(".ringattn-run-", 0) == 0) return true;
  return false;
}

// Pumps `p` until the job is under way (work directory made, ring formed) and returns
// every node process seen by then, by rank. Ranks that wait on nobody may already have
// finished; the slow fold keeps the others busy for 3 timeouts.
std::map<int, pid_t> wait_for_nodes(Spawned& p, const ScratchDir& dir) {
  std::map<int, pid_t> seen;
  const auto t0 = clock::now();
  std::optional<clock::time_point> settled;
  while (p.pump() && since(t0) < 30) {
    for (auto [pid, rank] : node_processes(p.pid())) seen[rank] = pid;
    if (!settled && !seen.empty() && has_work_dir(dir)) settled = clock::now();
    if (settled && since(*settled) > 1.0) return seen;
  }
  MESSAGE("the job did not get under way after " << since(t0) << " s; stdout: " << p.out() << "; stderr: " << p.err());
  return {};
}

// A 3-node job whose rank 0 folds slowly at step 1 (3 timeouts): long enough to act on.
std::vector<std::string> slow_job_args(const ScratchDir& dir) {
  Job job;
  job.nodes = 3;
  job.layout = "zigzag";
  job.mask = Mask::causal();
  job.timeout = kTimeout;
  return run_args(dir, job);
}

const Env kSlowRank0 = {{"RINGATTN_FAULT", "0:slow:1"}};

}  // namespace

TEST_CASE("lifecycle: killing `run` with SIGINT, SIGTERM or SIGKILL leaves no node and no work directory") {
  const Shape shape{203, 4, 2, 64};
  for (int sig : {SIGINT, SIGTERM, SIGKILL}) {
    ScratchDir dir;
    Inputs(shape, 3, DType::f32).write(dir);
    INFO("signal " << sig);
    Spawned run(slow_job_args(dir), kSlowRank0);
    const auto nodes = wait_for_nodes(run, dir);
    REQUIRE(nodes.count(0) == 1);
    REQUIRE(process_alive(nodes.at(0)));  // mid-job
    ::kill(run.pid(), sig);  // the coordinator only, as `kill PID` would
    const Outcome o = run.wait(30);
    CHECK(!o.timed_out);
    if (sig != SIGKILL) {
      CHECK(o.exit_code == 128 + sig);  // it ends by the signal, after cleaning up
      CHECK(o.err.find("interrupted by") != std::string::npos);
    }
    // Within the timeout, whatever the signal: every node gone, nothing left on disk.
    const auto t0 = clock::now();
    auto all_gone = [&] {
      for (auto [rank, pid] : nodes)
        if (process_alive(pid)) return false;
      return !has_work_dir(dir);
    };
    while (!all_gone() && since(t0) < kTimeout) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (auto [rank, pid] : nodes) CHECK_MESSAGE(!process_alive(pid), "rank " << rank << " still runs");
    CHECK(dir.entries() == std::vector<std::string>{"k.npy", "q.npy", "v.npy"});
  }
}

TEST_CASE("lifecycle: a node killed by a signal is named with the signal") {
  const Shape shape{203, 4, 2, 64};
  ScratchDir dir;
  Inputs(shape, 3, DType::f32).write(dir);
  Spawned run(slow_job_args(dir), kSlowRank0);
  const auto nodes = wait_for_nodes(run, dir);
  REQUIRE(nodes.count(1) == 1);
  REQUIRE(process_alive(nodes.at(1)));  // waiting on rank 0's slow fold
  ::kill(nodes.at(1), SIGKILL);
  const Outcome o = run.wait(60);
  INFO(o.err);
  CHECK(o.exit_code == 1);
  REQUIRE(!o.error_lines().empty());
  CHECK(o.error_lines().back() == "ringattn run: error: rank 1 was killed by signal 9 (SIGKILL)");
  CHECK(o.group_empty);
  CHECK(dir.entries() == std::vector<std::string>{"k.npy", "q.npy", "v.npy"});
}

TEST_CASE("lifecycle: a stopped node is named within about the timeout") {
  const Shape shape{203, 4, 2, 64};
  ScratchDir dir;
  Inputs(shape, 3, DType::f32).write(dir);
  Spawned run(slow_job_args(dir), {{"RINGATTN_FAULT", "2:slow:1"}});  // stopped in the middle of its work
  const auto nodes = wait_for_nodes(run, dir);
  REQUIRE(nodes.count(2) == 1);
  REQUIRE(process_alive(nodes.at(2)));  // in its slow fold
  const auto t0 = clock::now();
  ::kill(nodes.at(2), SIGSTOP);
  const Outcome o = run.wait(60);
  const double took = since(t0);
  INFO(o.err);
  CHECK(o.exit_code == 1);
  REQUIRE(!o.error_lines().empty());
  CHECK(o.error_lines().back().find("ringattn run: error: rank 2 was stopped by signal 19 (SIGSTOP)") == 0);
  // Its neighbours hear nothing for one timeout, then the survivors' grace: a hang guard
  // of a few timeouts, far below the old backstop of timeout*(P+2)+10 s.
  CHECK(took < 4 * kTimeout + 5);
  CHECK(o.group_empty);
}

TEST_CASE("lifecycle: a fold three timeouts long completes; the ring waits for a node that progresses") {
  const Shape shape{203, 4, 2, 64};
  ScratchDir dir;
  const Inputs in(shape, 3, DType::f32);
  in.write(dir);
  Job job;
  job.nodes = 3;
  job.layout = "zigzag";
  job.mask = Mask::causal();
  job.timeout = kTimeout;
  const Outcome o = run_ringattn(run_args(dir, job), {{"RINGATTN_FAULT", "1:slow:1"}}, 120);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  CHECK(o.wall_seconds > 3 * kTimeout);  // the fault did slow it down
  const auto ref = dense_reference(in, job.mask);
  CHECK(max_abs_error(read_npy_floats(dir.file("o.npy")), ref.o) <= 2e-5);
}

TEST_CASE("lifecycle: nodes launched through `env -i` (as over ssh, no environment) get the token anyway") {
  const Shape shape{150, 4, 2, 64};
  ScratchDir dir;
  const Inputs in(shape, 5, DType::f32);
  in.write(dir);
  Job job;
  job.nodes = 2;
  job.timeout = 10;
  job.extra = {"--launch", "env -i"};
  const Outcome o = run_ringattn(run_args(dir, job), {{"RINGATTN_TOKEN", "operator-token-0123456789abcdef"}}, 120);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  CHECK(max_abs_error(read_npy_floats(dir.file("o.npy")), dense_reference(in, job.mask).o) <= 2e-5);
}

TEST_CASE("lifecycle: `ringattn node` with --peers and no --listen listens on its own entry") {
  const Shape shape{150, 4, 2, 64};
  ScratchDir dir;
  const Inputs in(shape, 6, DType::f32);
  in.write(dir);
  const std::string peers = "127.0.0.1:" + std::to_string(free_port()) + ",127.0.0.1:" + std::to_string(free_port());
  const Env env = {{"RINGATTN_TOKEN", "rack-token-0123456789abcdef"}};
  std::vector<std::unique_ptr<Spawned>> nodes;
  for (int r = 0; r < 2; ++r)
    nodes.push_back(std::make_unique<Spawned>(
        std::vector<std::string>{"node", "--rank", std::to_string(r), "--nodes", "2", "--q", dir.file("q.npy"), "--k",
                                 dir.file("k.npy"), "--v", dir.file("v.npy"), "--peers", peers, "--out-dir",
                                 dir.path().string(), "--timeout", "10"},
        env));
  for (int r = 0; r < 2; ++r) {
    const Outcome o = nodes[static_cast<std::size_t>(r)]->wait(60);
    INFO("rank " << r << ": " << o.err);
    CHECK(o.exit_code == 0);
  }
  const auto o0 = read_npy_floats(dir.file("rank0.o.npy"));
  CHECK(o0.size() == static_cast<std::size_t>(75 * 4 * 64));  // rank 0's contiguous half
}

}  // namespace ringattn::itest
