// `ringattn status` — asks a daemon for the ring's nodes, then every node for its own
// state: version, ISA, threads, state, uptime, jobs, last job. --wait S polls until every
// node of the ring reports the ring ready (for scripts that start daemons).
#include "control_protocol.hpp"  // first Asio include: silences GCC's coroutine false positive

#include <asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "ringattn/error.hpp"
#include "../cli/args.hpp"
#include "../cli/json_object.hpp"
#include "../cli/json_on_failure.hpp"
#include "../../infer/common/json.hpp"

namespace ringattn::cli {
int status_main(const std::vector<std::string>& argv);
}

namespace ringattn::serve {
namespace {

struct NodeReport {
  std::string control;
  std::string json;   // the node's status object, or empty
  std::string error;  // why it could not be asked
  infer::Json value;
};

// One request on a fresh connection; returns the "data" member's text.
std::string ask(const std::string& to, const std::string& op, const std::string& secret, bool tls, Millis timeout) {
  asio::io_context io;
  std::string reply;
  std::exception_ptr failure;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto c = co_await connect_control(to, secret, tls, timeout);
        co_await c.write_json(cli::JsonObject().add("op", op).str());
        reply = co_await c.read_json();
        c.close();
      },
      [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
  const infer::Json v = infer::parse_json(reply);
  const std::string* event = infer::json_string(v, "event");
  const infer::Json* data = infer::json_field(v, "data");
  if (!event || *event != op || !data) {
    const std::string* m = data ? infer::json_string(*data, "message") : nullptr;
    throw Error("daemon at " + to + ": " + (m ? *m : "unexpected answer to '" + op + "'"));
  }
  return data->dump();
}

std::string field(const infer::Json& v, const char* key) {
  if (const std::string* s = infer::json_string(v, key)) return *s;
  if (const std::optional<double> x = infer::json_number(v, key)) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", *x);
    return b;
  }
  return "-";
}

std::vector<NodeReport> survey(const std::string& to, const std::string& secret, bool tls, Millis timeout) {
  const infer::Json nodes = infer::parse_json(ask(to, "nodes", secret, tls, timeout));
  std::vector<NodeReport> out;
  if (!nodes.is_array()) throw Error("daemon at " + to + ": its node table is not a list");
  for (const auto& n : nodes) {
    NodeReport r;
    r.control = field(n, "control");
    try {
      r.json = ask(r.control, "status", secret, tls, timeout);
      r.value = infer::parse_json(r.json);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool all_ready(const std::vector<NodeReport>& nodes) {
  if (nodes.empty()) return false;
  const std::optional<double> w = infer::json_number(nodes.front().value, "world_size");
  if (!w || *w != static_cast<double>(nodes.size())) return false;
  for (const auto& n : nodes) {
    const std::string s = n.error.empty() ? field(n.value, "state") : "";
    if (s != "ready" && s != "running") return false;
  }
  return true;
}

int run_status(const cli::Args& a) {
  const std::string to = a.str("to");
  const Millis timeout(static_cast<std::int64_t>(a.seconds("timeout", 0.001, 86400) * 1000));
  const double wait = a.has("wait") ? a.seconds("wait", 0, 86400) : 0;
  const std::string secret = client_secret(a.maybe("token-file"));
  const bool tls = a.has("tls");
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
  std::vector<NodeReport> nodes;
  std::string last_error;
  for (;;) {
    try {
      nodes = survey(to, secret, tls, timeout);
      last_error.clear();
      if (wait == 0 || all_ready(nodes)) break;
    } catch (const Error& e) {
      last_error = e.what();
      if (wait == 0) throw;
    }
    if (std::chrono::steady_clock::now() >= until) {
      if (!last_error.empty()) throw NetworkError("the ring did not answer within --wait " + a.str("wait") + " s: " + last_error);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const bool ready = all_ready(nodes);
  if (a.has("json")) {
    std::vector<std::string> list;
    for (const auto& n : nodes)
      list.push_back(n.error.empty() ? n.json : cli::JsonObject().add("control", n.control).add("error", n.error).str());
    std::printf("%s\n",
                cli::JsonObject().add("ok", ready).add("command", "status").add("ready", ready).add_json("nodes", list).str().c_str());
  } else {
    std::printf("%-4s %-16s %-22s %-9s %-9s %-8s %-7s %-12s %s\n", "rank", "host", "control", "state", "uptime", "isa",
                "threads", "jobs ok/bad", "last job");
    for (const auto& n : nodes) {
      if (!n.error.empty()) {
        std::printf("%-4s %-16s %-22s unreachable: %s\n", "?", "-", n.control.c_str(), n.error.c_str());
        continue;
      }
      const infer::Json& v = n.value;
      std::string last = "-";
      if (const infer::Json* j = infer::json_field(v, "last_job"); j && j->is_object())
        last = "#" + field(*j, "id") + " " + field(*j, "result") + " " + field(*j, "seconds") + " s";
      char uptime[32];
      std::snprintf(uptime, sizeof uptime, "%.0f s", infer::json_number(v, "uptime_seconds").value_or(0));
      const std::string jobs = field(v, "jobs_ok") + "/" +
                               std::to_string(static_cast<long long>(infer::json_number(v, "jobs_failed").value_or(0) +
                                                                     infer::json_number(v, "jobs_aborted").value_or(0)));
      std::printf("%-4s %-16s %-22s %-9s %-9s %-8s %-7s %-12s %s\n", field(v, "rank").c_str(), field(v, "host").c_str(),
                  n.control.c_str(), field(v, "state").c_str(), uptime, field(v, "isa").c_str(),
                  field(v, "threads").c_str(), jobs.c_str(), last.c_str());
    }
    std::size_t answered = 0;
    for (const auto& n : nodes) answered += n.error.empty() ? 1 : 0;
    if (!nodes.empty() && nodes.front().error.empty())
      std::printf("ringattn %s, %zu of %s daemons answered, ring %s\n", field(nodes.front().value, "version").c_str(),
                  answered, field(nodes.front().value, "world_size").c_str(), ready ? "ready" : "not ready");
  }
  if (wait > 0 && !ready) throw NetworkError("the ring was not ready within --wait " + a.str("wait") + " s");
  return 0;
}

}  // namespace
}  // namespace ringattn::serve

int ringattn::cli::status_main(const std::vector<std::string>& argv) {
  Args a("status", "Asks a daemon (ringattn serve) for the ring's nodes and each node for its state: version,\n"
                   "ISA, threads, state, uptime, jobs and the last job.");
  a.option("to", "HOST:PORT", "any daemon's control address")
      .option("token-file", "FILE", "the daemons' shared secret, mode 0600 (default: RINGATTN_TOKEN_FILE or RINGATTN_TOKEN)")
      .flag("tls", "TLS 1.3 to the daemons (they must run with --tls)")
      .option("timeout", "S", "seconds to wait for each daemon's answer", "10")
      .option("wait", "S", "poll until every daemon of the ring reports it ready, at most S seconds (exit 1 if not)")
      .flag("json", "print one JSON object on stdout and nothing else (also on failure: \"ok\": false)");
  if (!a.parse(argv)) return 0;
  return json_on_failure(argv, "status", [&] { return serve::run_status(a); });
}
