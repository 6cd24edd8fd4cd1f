// `ringattn serve` — one ring-node daemon: forms the ring with its peers through the
// library, keeps it up between jobs, takes jobs and status requests on its control port,
// serves /metrics and /healthz over HTTP, reports readiness to systemd, and drains on
// SIGTERM (the running job finishes, or is aborted after --grace), exiting 0.
#include <pthread.h>
#include <signal.h>
#include <systemd/sd-daemon.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "../cli/log.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/log.hpp"
#include "../cli/args.hpp"
#include "../cli/json_object.hpp"
#include "control_server.hpp"
#include "http_server.hpp"
#include "metrics.hpp"
#include "openai_api.hpp"
#include "ring_service.hpp"
#include "serve_config.hpp"
#include "ringattn_config.h"

namespace ringattn::cli {
int serve_main(const std::vector<std::string>& argv);
}

namespace ringattn::serve {
namespace {

// JSON lines on stderr: {"ts":..., "level":..., "rank":R, "logger":..., "msg":...}.
void use_json_logs(int rank) {
  static std::mutex mu;
  set_log_sink([rank](LogLevel level, std::string_view name, std::string_view message) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    tm t{};
    gmtime_r(&ts.tv_sec, &t);
    char when[64];
    std::snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                  t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(ts.tv_nsec / 1000000) % 1000);
    cli::JsonObject o;
    o.add("ts", when).add("level", to_string(level)).add("rank", rank).add("logger", name).add("msg", message);
    const std::string line = o.str() + "\n";
    std::lock_guard lock(mu);
    std::fwrite(line.data(), 1, line.size(), stderr);
  });
}

void describe_metrics(Metrics& m) {
  using T = Metrics::Type;
  m.describe("ringattn_up", T::gauge, "1 while the daemon runs");
  m.describe("ringattn_info", T::gauge, "the daemon's version, rank and kernel path (value 1)");
  m.describe("ringattn_uptime_seconds", T::gauge, "seconds since the daemon started");
  m.describe("ringattn_ring_state", T::gauge, "1 for the ring's current state");
  m.describe("ringattn_ring_formations_total", T::counter, "times the ring formed (re-formed after a failure)");
  m.describe("ringattn_ring_failures_total", T::counter, "times the ring broke");
  m.describe("ringattn_jobs_total", T::counter, "jobs finished on this rank, by result");
  m.describe("ringattn_job_failures_total", T::counter, "jobs failed or aborted, by cause");
  m.describe("ringattn_jobs_queued", T::gauge, "jobs waiting for the ring (rank 0)");
  m.describe("ringattn_bytes_sent_total", T::counter, "bytes this rank sent on the ring's links");
  m.describe("ringattn_bytes_received_total", T::counter, "bytes this rank received on the ring's links");
  m.describe("ringattn_link_bytes_sent_total", T::counter, "bytes this rank sent on its link to rank `peer`");
  m.describe("ringattn_link_bytes_received_total", T::counter, "bytes this rank received on its link from rank `peer`");
  m.describe("ringattn_compute_seconds_total", T::counter, "seconds in the attention kernel");
  m.describe("ringattn_exposed_wait_seconds_total", T::counter,
             "seconds the kernel waited on the network after its fold (transfer not hidden by compute)");
  m.describe("ringattn_useful_flops_total", T::counter, "useful attention FLOPs (visible pairs only)");
  m.describe("ringattn_control_refused_total", T::counter, "control connections dropped, by reason");
  m.describe("ringattn_generations_total", T::counter, "generation requests of the hosted model, by result (ok, failed, cancelled)");
  m.describe("ringattn_generations_queued", T::gauge, "generation requests waiting for the ring (rank 0)");
  m.describe("ringattn_generated_tokens_total", T::counter, "tokens through the hosted model: phase prefill (prompt rows) and decode (generated)");
  m.describe("ringattn_prefill_tokens_per_second", T::gauge, "the last batch's prompt tokens / its prefill time");
  m.describe("ringattn_decode_tokens_per_second", T::gauge, "the last batch's generated tokens / its decode time");
  m.describe("ringattn_generation_cache_rows", T::gauge, "KV-cache rows (tokens, per layer) this rank keeps for sessions between jobs");
  m.describe("ringattn_sessions", T::gauge, "open sessions (rank 0)");
  m.describe("ringattn_sessions_evicted_total", T::counter, "idle sessions ended to make room for a request in a full cache (rank 0)");
  m.describe("ringattn_prefix_cache_entries", T::gauge, "whole replies whose rows are kept for prompts that start the same way (rank 0)");
  m.describe("ringattn_prefix_cache_rows", T::gauge, "KV-cache rows the prefix cache's entries hold, ring-wide (rank 0)");
  m.describe("ringattn_prefix_cache_lookups_total", T::counter, "prompts looked up in the prefix cache (rank 0)");
  m.describe("ringattn_prefix_cache_hits_total", T::counter, "prompts that found a cached prefix and computed only the rest (rank 0)");
  m.describe("ringattn_prefix_cache_cached_tokens_total", T::counter, "prompt tokens whose rows were found cached, not computed (rank 0)");
  m.describe("ringattn_prefix_cache_evictions_total", T::counter, "prefix-cache entries ended to make room, least recently used first (rank 0)");
  m.describe("ringattn_cache_rows_reserved", T::gauge, "KV-cache rows the ring holds or has promised: sessions and requests in flight (rank 0)");
  m.describe("ringattn_cache_rows_capacity", T::gauge, "KV-cache rows the ring may hold: cache_mib on every daemon in this model's rows");
  m.describe("ringattn_api_requests_total", T::counter, "requests to the OpenAI-style endpoint, by HTTP status");
  m.describe("ringattn_api_clients_gone_total", T::counter, "streams whose client left before the last token (the request is cancelled)");
  m.describe_histogram("ringattn_time_to_first_token_seconds", "from a request's arrival to its first token (rank 0)",
                       {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  m.describe_histogram("ringattn_inter_token_seconds", "between two tokens of one request (rank 0)",
                       {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1});
  m.describe_histogram("ringattn_job_seconds", "job time (rank 0: whole job; workers: their forward pass)",
                       {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300});
  m.describe_histogram("ringattn_step_seconds", "one ring step on this rank (fold plus exposed wait)",
                       {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5});
}

// /metrics and /healthz: GET only, with the bounds of a scraper's and a probe's requests.
std::unique_ptr<HttpServer> metrics_server(const std::string& listen, RingService& service, Metrics& metrics,
                                           std::chrono::steady_clock::time_point started) {
  HttpLimits l;
  l.head_bytes = 8 << 10;
  l.body_bytes = 4 << 10;
  l.request_deadline = std::chrono::seconds(5);
  l.threads = 8;
  l.per_client = 4;
  auto server = std::make_unique<HttpServer>(listen, "--metrics", l);
  httplib::Server& s = server->routes();
  constexpr const char* kText = "text/plain; charset=utf-8";
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "GET" || req.method == "HEAD") return httplib::Server::HandlerResponse::Unhandled;
    res.status = 405;
    res.set_header("Allow", "GET");
    res.set_content("only GET: /metrics or /healthz\n", kText);
    return httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/healthz", [&service](const httplib::Request&, httplib::Response& res) {
    const std::string h = service.health();
    res.status = h == "ok" ? 200 : 503;
    res.set_content(h + "\n", kText);
  });
  s.Get("/metrics", [&metrics, started](const httplib::Request&, httplib::Response& res) {
    metrics.set("ringattn_uptime_seconds", {}, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404) res.set_content("not found: try /metrics or /healthz\n", kText);
  });
  server->start();
  return server;
}

bool wildcard(const std::string& host) { return host == "0.0.0.0" || host == "::" || host.empty(); }

// Where the other daemons and clients reach `listen` (a wildcard bind is advertised as
// the address this host reaches the ring by).
std::string advertised(const std::string& listen, const ServeConfig& c, const char* what) {
  auto a = parse_host_port(listen, what);
  if (wildcard(a.host)) {
    if (!c.ring.master.empty()) a.host = local_address_towards(parse_host_port(c.ring.master, "--master").text());
    else if (!c.ring.peers.empty())
      a.host = parse_host_port(c.ring.peers[static_cast<std::size_t>(c.ring.rank)], "--peers").host;
    else a.host = "127.0.0.1";
  }
  return a.text();
}

// A hosted model: each daemon reads its own files now, before the ring forms; the ring
// then refuses to form unless every daemon holds the same (ring_generation.cpp).
std::shared_ptr<HostedModel> host_model(const ServeConfig& c) {
  if (c.model.empty()) return nullptr;
  auto model = std::make_shared<HostedModel>();
  infer::set_model_path(model->options, c.model, "model");
  model->options.tokenizer = c.tokenizer;
  model->options.threads = c.ring.threads;
  model->options.dtype = c.wire_dtype;
  model->options.weights_dtype = c.weights_dtype;
  model->options.activations = c.activations;
  infer::place_in_ring(model->options, c.ring);  // this daemon's part of every layer (ring.group_size = tp)
  model->job = infer::load_model(model->options);
  if (!model->job.tokenizer) throw InvalidArgument("hosting " + c.model + " needs the model's tokenizer: " + model->job.tokenizer_missing);
  model->digest = model->job.digest();
  model->token_bytes = std::make_shared<const infer::constrain::TokenBytes>(infer::constrain::token_bytes(*model->job.tokenizer));
  // The endpoint's name for it: a directory's name, a file's without its extension.
  std::filesystem::path named(c.model);
  if (!named.has_filename()) named = named.parent_path();
  model->name = (model->options.hf.empty() ? named.stem() : named.filename()).string();
  cli::logger("serve")->info("hosting {} ({})", model->name, model->job.description);
  if (!model->job.chat.tmpl && model->options.llama2c.empty())
    cli::logger("serve")->warn("/v1/chat/completions is refused for {}: {}", model->name, model->job.chat.refused);
  return model;
}

// Rank 0's OpenAI endpoint, keyed by --api-key-file (else the ring's secret; "none" on
// loopback only); null where there is none.
std::unique_ptr<OpenAiEndpoint> api_endpoint(const ServeConfig& c, const std::string& secret, RingService& service,
                                             Metrics& metrics) {
  if (c.api == "off" || c.ring.rank != 0) return nullptr;
  std::string key = secret;
  if (c.api_key_file == "none") {
    const std::string host = parse_host_port(c.api, "--api").host;
    if (host != "127.0.0.1" && host != "::1" && host != "localhost")
      throw InvalidArgument("--api-key-file none leaves the endpoint open: allowed on loopback only, not on " + c.api);
    key.clear();
  } else if (!c.api_key_file.empty()) {
    key = load_token(c.api_key_file);
  }
  return std::make_unique<OpenAiEndpoint>(c.api, key, service, metrics);
}

// /metrics and /healthz where --metrics says (its default port taken by another daemon on
// this host: any free one on loopback, told to the others and in the log); null if off.
std::unique_ptr<HttpServer> metrics_endpoint(ServeConfig& c, RingService& service, Metrics& metrics) {
  if (c.metrics == "off") return nullptr;
  const auto started = std::chrono::steady_clock::now();
  std::unique_ptr<HttpServer> http;
  try {
    http = metrics_server(c.metrics, service, metrics, started);
  } catch (const NetworkError& e) {
    if (!c.metrics_fallback) throw;
    http = metrics_server(parse_host_port(c.metrics, "--metrics").host + ":0", service, metrics, started);
    c.metrics = parse_host_port(c.metrics, "--metrics").host + ":" + std::to_string(http->port());
    cli::logger("serve")->warn("{}; /metrics and /healthz on {} instead (--metrics sets the address)", e.what(), c.metrics);
  }
  service.set_metrics_address(advertised(c.metrics, c, "--metrics"));
  return http;
}

// The metrics every daemon starts with: up, and what it is.
void start_metrics(Metrics& metrics, const ServeConfig& c) {
  describe_metrics(metrics);
  metrics.set("ringattn_up", {}, 1);
  metrics.set("ringattn_info",
              Labels{{"version", RINGATTN_VERSION},
                     {"rank", std::to_string(c.ring.rank)},
                     {"world_size", std::to_string(c.ring.world_size)},
                     {"isa", std::string(to_string(c.ring.isa.value_or(default_isa())))}},
              1);
}

// Waits for SIGTERM, SIGINT or SIGHUP (blocked on every other thread), then drains the service.
void on_signal(const sigset_t& signals, RingService& service, double grace) {
  int sig = 0;
  sigwait(&signals, &sig);
  if (sig == 0) return;
  cli::logger("serve")->info("{}: draining (grace {:.0f} s)", sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP",
                             grace);
  service.stop();
  // While the ring forms there is no job to drain, but an attempt to connect cannot be
  // interrupted and may last connect_timeout: do not make the operator wait for it.
  for (int i = 0; i < 20 && service.state() == RingState::forming; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (service.state() == RingState::forming) {
    cli::logger("serve")->info("stopped while the ring was forming");
    std::fflush(stderr);
    std::_Exit(0);
  }
}

int run_serve(const cli::Args& a) {
  ServeConfig c = load_serve_config(a);
  if (!c.log_level.empty()) cli::set_log_level(c.log_level, c.sources.count("log_level") ? c.sources["log_level"] : "--log-level");
  set_log_rank(c.ring.rank);
  if (c.log_format == LogFormat::json) use_json_logs(c.ring.rank);
  if (!c.sources.count("connect_timeout")) c.ring.connect_timeout = 10;  // one attempt; the daemon retries forever
  const std::string secret = c.ring.token.empty() ? load_token(c.ring.token_file)
                                                  : checked_token(c.ring.token, "RINGATTN_TOKEN");
  c.ring.token = secret;
  c.ring.token_file.clear();

  // Signals go to one thread; every other thread starts with them blocked.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Metrics metrics;
  start_metrics(metrics, c);
  auto notify = [](const std::string& line) { sd_notify(0, line.c_str()); };
  const std::string control = advertised(c.control, c, "--control");
  RingService service(c, metrics, control, "off", notify, host_model(c));
  const std::unique_ptr<OpenAiEndpoint> api = api_endpoint(c, secret, service, metrics);
  ControlServer server(c.control, secret, c.ring.tls, c.ring.timeout, service, metrics);
  const std::unique_ptr<HttpServer> http = metrics_endpoint(c, service, metrics);
  cli::logger("serve")->info("rank {} of {}: control on {}{}{}; {} kernel threads{}", c.ring.rank, c.ring.world_size, control,
                             http ? ", metrics on " : "", http ? c.metrics : "", c.ring.threads,
                             c.sources.count("threads") ? " (" + c.sources["threads"] + ")"
                                                        : " (" + std::to_string(c.cores) + " cores / " + std::to_string(c.daemons_here) +
                                                              " daemon" + (c.daemons_here > 1 ? "s" : "") + " of the ring on this host; --threads sets it)");
  std::thread signal_thread([&] { on_signal(signals, service, c.grace); });
  service.run();  // returns only after stop(): the signal thread has its signal
  signal_thread.join();
  cli::logger("serve")->info("stopped");
  return 0;
}

}  // namespace
}  // namespace ringattn::serve

int ringattn::cli::serve_main(const std::vector<std::string>& argv) {
  Args a("serve", "A ring-node daemon: forms the ring with its peers and keeps it up; takes attention jobs\n"
                  "(ringattn submit) and status requests (ringattn status) on its control port; serves\n"
                  "Prometheus metrics and /healthz over HTTP. SIGTERM drains and exits 0.");
  serve::declare_serve_options(a);
  a.epilogue("Every option can also come from a TOML file (--config, or RINGATTN_CONFIG) under the key named in\n"
             "brackets, or from the environment variable named there; flags win over the environment, which\n"
             "wins over the file. Rank and world size also come from Slurm, mpirun, PMI or torchrun.\n"
             "The token (--token-file or RINGATTN_TOKEN) authenticates the ring and every client.");
  if (!a.parse(argv)) return 0;
  return serve::run_serve(a);
}
