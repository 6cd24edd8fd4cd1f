// The launcher's choice of the rank where a failed job began (src/run/root_cause.hpp):
// the same answer however the nodes' exits and reports interleave.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>

#include "src/run/root_cause.hpp"

using namespace ringattn;
using namespace ringattn::run;

namespace {

const node::Ident kRing{"aaaaaaaaaaaaaaaa", "1111111111111111"};

NodeEnd ok_until(int rank, int code, std::optional<node::FailReport> report = {}) {
  NodeEnd n;
  n.rank = rank;
  n.exit = ExitStatus{code, 0, false};
  n.ident = kRing;
  n.report = std::move(report);
  return n;
}

// Every permutation of the nodes gives the same root cause.
RootCause stable(std::vector<NodeEnd> nodes) {
  std::sort(nodes.begin(), nodes.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  const RootCause first = find_root_cause(nodes, kRing, 3);
  do {
    const RootCause r = find_root_cause(nodes, kRing, 3);
    REQUIRE(r.rank == first.rank);
    REQUIRE(r.message == first.message);
  } while (std::next_permutation(nodes.begin(), nodes.end(), [](auto& a, auto& b) { return a.rank < b.rank; }));
  return first;
}

}  // namespace

TEST_CASE("root cause: a shape mismatch names the rank started with other options, whoever noticed first") {
  // Rank 0 only saw rank 2 reset its connection (the audit's report); ranks 1 and 2
  // report the mismatch; rank 1's fingerprint differs from the launcher's.
  auto n0 = ok_until(0, 1, node::FailReport{FailureCause::peer_closed, 2, "rank 0: bad AUTH frame from peer rank 2: Connection reset by peer"});
  auto n1 = ok_until(1, 1, node::FailReport{FailureCause::mismatch, 2, "rank 1: job shape field 'options_digest' differs: rank 1 has 7, peer rank 2 has 6"});
  auto n2 = ok_until(2, 1, node::FailReport{FailureCause::mismatch, 1, "rank 2: job shape field 'options_digest' differs: rank 2 has 6, peer rank 1 has 7"});
  n1.ident->job = "bbbbbbbbbbbbbbbb";
  const RootCause r = stable({n0, n1, n2});
  CHECK(r.rank == 1);
  CHECK(r.message.find("rank 1 was started with another job shape") == 0);
  CHECK(r.message.find("job shape field 'options_digest'") != std::string::npos);
}

TEST_CASE("root cause: a different token is blamed on its holder, not on the side that refused it") {
  auto n0 = ok_until(0, 1, node::FailReport{FailureCause::auth, 1, "rank 0: ... authentication failed ..."});
  auto n1 = ok_until(1, 1, node::FailReport{FailureCause::auth, 0, "rank 1: ... authentication failed ..."});
  auto n2 = ok_until(2, 1, node::FailReport{FailureCause::peer_silent, 1, "rank 2: no connection from predecessor rank 1"});
  n1.ident->token = "2222222222222222";
  const RootCause r = stable({n0, n1, n2});
  CHECK(r.rank == 1);
  CHECK(r.message.find("another token") != std::string::npos);
}

TEST_CASE("root cause: a node killed by someone else beats every report about it") {
  auto n0 = ok_until(0, 1, node::FailReport{FailureCause::peer_closed, 1, "rank 0: successor rank 1 closed the connection"});
  NodeEnd n1;
  n1.rank = 1;
  n1.exit = ExitStatus{0, SIGKILL, false};
  n1.last_error_line = "[14:00:00.000] [rank 1] [net] info: connected ...";
  auto n2 = ok_until(2, 1, node::FailReport{FailureCause::peer_closed, 1, "rank 2: predecessor rank 1 closed"});
  const RootCause r = stable({n0, n1, n2});
  CHECK(r.rank == 1);
  CHECK(r.message == "rank 1 was killed by signal 9 (SIGKILL)");
}

TEST_CASE("root cause: a stopped node is named with its signal; one killed by the launcher is not 'killed'") {
  auto n0 = ok_until(0, 1, node::FailReport{FailureCause::peer_silent, 2, "rank 0: no sign of life from predecessor rank 2"});
  NodeEnd n2;
  n2.rank = 2;
  n2.exit = ExitStatus{0, SIGKILL, true};
  n2.stop_signal = SIGSTOP;
  auto n1 = ok_until(1, 1, node::FailReport{FailureCause::peer_closed, 0, "rank 1: ..."});
  const RootCause r = stable({n0, n1, n2});
  CHECK(r.rank == 2);
  CHECK(r.message.find("rank 2 was stopped by signal 19 (SIGSTOP)") == 0);
}

TEST_CASE("root cause: a node that died without a report is named with its last words") {
  auto n0 = ok_until(0, 1, node::FailReport{FailureCause::peer_closed, 1, "rank 0: successor rank 1 closed the connection (EOF)"});
  auto n1 = ok_until(1, 17);
  n1.last_error_line = "fault injected: exiting abruptly at step 1";
  auto n2 = ok_until(2, 1, node::FailReport{FailureCause::peer_closed, 1, "rank 2: predecessor rank 1 closed the connection (EOF)"});
  const RootCause r = stable({n0, n1, n2});
  CHECK(r.rank == 1);
  CHECK(r.message == "rank 1 failed (exit 17) without a report: fault injected: exiting abruptly at step 1");
}

TEST_CASE("root cause: reports are ranked by cause; the original words beat a relay") {
  // Rank 1 hung: rank 2 saw the stall, rank 0 only heard rank 2's ERROR (relayed,
  // origin 1), and rank 1 was killed by the launcher after the grace.
  auto n0 = ok_until(0, 1, node::FailReport{FailureCause::peer_stalled, 1, "rank 0: predecessor rank 2 aborted: rank 2: timed out ... rank 1 ... no progress"});
  NodeEnd n1;
  n1.rank = 1;
  n1.exit = ExitStatus{0, SIGKILL, true};
  auto n2 = ok_until(2, 1, node::FailReport{FailureCause::peer_stalled, 1, "rank 2: timed out ... rank 1 ... no progress"});
  const RootCause r = stable({n0, n1, n2});
  CHECK(r.rank == 1);
  CHECK(r.message == "rank 1 failed: rank 2: timed out ... rank 1 ... no progress");
  // A rank's own failure (bad input) outranks everything its neighbours said about it.
  auto bad = ok_until(2, 1, node::FailReport{FailureCause::local, 2, "rank 2: v.npy: token 200, kv head 1, element 5 is nan"});
  auto n0b = ok_until(0, 1, node::FailReport{FailureCause::peer_closed, 2, "rank 0: predecessor rank 2 closed"});
  const RootCause r2 = stable({n0b, bad});
  CHECK(r2.rank == 2);
  CHECK(r2.message == "rank 2 failed: v.npy: token 200, kv head 1, element 5 is nan");
}
