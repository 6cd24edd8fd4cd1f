#include "root_cause.hpp"

#include <algorithm>
#include <map>

namespace ringattn::run {
namespace {

// A node's last stderr line is "ringattn node: error: rank R: <cause>"; the launcher's
// own line already says which rank, so keep only the cause.
std::string node_cause(std::string line, int rank) {
  for (const std::string& prefix : {std::string("ringattn node: error: "), "rank " + std::to_string(rank) + ": "})
    if (line.rfind(prefix, 0) == 0) line.erase(0, prefix.size());
  return line;
}

// Strongest first (see the header).
int strength(FailureCause c) {
  switch (c) {
    case FailureCause::local: return 7;
    case FailureCause::protocol: return 6;
    case FailureCause::mismatch: return 5;
    case FailureCause::auth: return 4;
    case FailureCause::peer_stalled: return 3;
    case FailureCause::peer_silent: return 2;
    case FailureCause::peer_closed: return 1;
    case FailureCause::unknown: return 0;
  }
  return 0;
}

std::string strip_rank(const std::string& message, int rank) { return node_cause(message, rank); }

}  // namespace

RootCause find_root_cause(const std::vector<NodeEnd>& given, const node::Ident& expected, double timeout_seconds) {
  std::vector<NodeEnd> nodes = given;  // rank order: every tie below goes to the lowest rank
  std::sort(nodes.begin(), nodes.end(), [](const NodeEnd& a, const NodeEnd& b) { return a.rank < b.rank; });
  const auto name = [](int r) { return "rank " + std::to_string(r); };
  // 1. killed by someone else
  for (const auto& n : nodes)
    if (n.exit && n.exit->signal != 0 && !n.exit->by_us)
      return {n.rank, name(n.rank) + " was " + n.exit->describe()};
  // 2. stopped
  for (const auto& n : nodes)
    if (n.stop_signal != 0) {
      char t[32];
      std::snprintf(t, sizeof t, "%g", timeout_seconds);
      return {n.rank, name(n.rank) + " was stopped by signal " + std::to_string(n.stop_signal) + " (" +
                          signal_name(n.stop_signal) + ") and its peers heard nothing from it for " + t + " s"};
    }
  // 3. another job or token than the launcher's
  // Its own words about it if it has some, else the lowest rank's (order-independent).
  auto best_report_about = [&](int rank, FailureCause cause) -> std::string {
    const NodeEnd* pick = nullptr;
    for (const auto& n : nodes)
      if (n.report && n.report->cause == cause && (n.rank == rank || n.report->origin == rank))
        if (!pick || (n.rank == rank) > (pick->rank == rank) || ((n.rank == rank) == (pick->rank == rank) && n.rank < pick->rank))
          pick = &n;
    return pick ? pick->report->message : std::string();
  };
  for (const auto& n : nodes) {
    if (!n.ident) continue;
    if (!expected.job.empty() && n.ident->job != expected.job) {
      std::string why = best_report_about(n.rank, FailureCause::mismatch);
      return {n.rank, name(n.rank) + " was started with another job shape than the ring's (fingerprint " + n.ident->job +
                          ", expected " + expected.job + ")" + (why.empty() ? "" : ": " + why)};
    }
    if (!expected.token.empty() && !n.ident->token.empty() && n.ident->token != expected.token) {
      std::string why = best_report_about(n.rank, FailureCause::auth);
      return {n.rank, name(n.rank) + " holds another token than the ring's (authentication fails with it)" +
                          (why.empty() ? "" : ": " + why)};
    }
  }
  // 4. died without a report
  for (const auto& n : nodes)
    if (n.exit && n.exit->code != 0 && !n.report) {
      std::string why = node_cause(n.last_error_line, n.rank);
      return {n.rank, name(n.rank) + " failed (" + n.exit->describe() + ") without a report" +
                          (why.empty() ? "" : ": " + why)};
    }
  // 5. the reports
  int best = -1;
  for (const auto& n : nodes)
    if (n.report) best = std::max(best, strength(n.report->cause));
  if (best >= 0) {
    std::map<int, int> votes;  // origin -> reports of the strongest cause that blame it
    for (const auto& n : nodes)
      if (n.report && strength(n.report->cause) == best) ++votes[n.report->origin >= 0 ? n.report->origin : n.rank];
    int blamed = -1, most = 0;
    for (const auto& [rank, v] : votes)
      if (v > most) blamed = rank, most = v;
    // The blamed rank's own words if it said something of that strength, else the
    // lowest-ranked report that blames it.
    const NodeEnd* pick = nullptr;
    for (const auto& n : nodes)
      if (n.report && strength(n.report->cause) == best && n.rank == blamed) pick = &n;
    if (!pick)  // the shortest report that blames it: the original, not a relay quoting it
      for (const auto& n : nodes)
        if (n.report && strength(n.report->cause) == best && (n.report->origin >= 0 ? n.report->origin : n.rank) == blamed &&
            (!pick || n.report->message.size() < pick->report->message.size() ||
             (n.report->message.size() == pick->report->message.size() && n.rank < pick->rank)))
          pick = &n;
    if (pick) {
      const std::string msg = pick->rank == blamed ? strip_rank(pick->report->message, pick->rank) : pick->report->message;
      return {blamed, name(blamed) + " failed: " + msg};
    }
  }
  for (const auto& n : nodes)
    if (!n.exit || n.exit->code != 0)
      return {n.rank, name(n.rank) + (n.exit ? " failed (" + n.exit->describe() + ")" : " did not finish") +
                          (n.last_error_line.empty() ? "" : ": " + node_cause(n.last_error_line, n.rank))};
  return {-1, "the job failed, but no node said why"};
}

}  // namespace ringattn::run
