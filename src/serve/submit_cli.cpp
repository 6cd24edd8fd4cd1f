// `ringattn submit` — sends one attention job to a ring of daemons (`ringattn serve`):
// streams Q, K and V to the daemon, which coordinates the ring (another rank redirects
// to rank 0), shows the job's progress, and writes O (and lse) all-or-nothing.
#include "control_protocol.hpp"  // first Asio include: silences GCC's coroutine false positive

#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>

#include "ringattn/error.hpp"
#include "ringattn/log.hpp"
#include "../cli/args.hpp"
#include "../cli/json_object.hpp"
#include "../cli/json_on_failure.hpp"
#include "../../infer/common/json.hpp"
#include "../io/finite_check.hpp"
#include "../io/npy_reader.hpp"
#include "../io/npy_writer.hpp"
#include "../node/job.hpp"
#include "../run/output_paths.hpp"
#include "job.hpp"

namespace ringattn::cli {
int submit_main(const std::vector<std::string>& argv);
}

namespace ringattn::serve {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Outcome {
  std::uint64_t job = 0;
  std::vector<cli::JsonObject> nodes;
  double seconds = 0, ring_seconds = 0, upload_seconds = 0, download_seconds = 0;
  std::string daemon;
  std::string dtype;  // what the daemons run the job in (their wire_dtype unless asked)
};

// A one-line progress display on stderr (overwritten on a terminal, one line per event
// otherwise).
struct Progress {
  bool on = true;
  bool tty = ::isatty(2) != 0;
  void line(const std::string& s, bool final = false) const {
    if (!on) return;
    if (tty) std::fprintf(stderr, "\r\033[K%s%s", s.c_str(), final ? "\n" : "");
    else if (!s.empty()) std::fprintf(stderr, "%s\n", s.c_str());
  }
};

std::string mib(std::uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return b;
}

double number(const infer::Json& v, const char* key) { return infer::json_number(v, key).value_or(0); }
std::string text(const infer::Json& v, const char* key) {
  const std::string* s = infer::json_string(v, key);
  return s ? *s : "";
}

cli::JsonObject to_object(const infer::Json& v) {  // a node's stats, as received
  cli::JsonObject o;
  if (v.is_object())
    for (const auto& [k, f] : v.items())
      if (f.is_number()) o.add(k, f.get<double>());
  return o;
}

// Sends each rank's rows (ranks 1..P-1, then 0) as rank 0 asks for them: K, V, Q.
asio::awaitable<void> upload(Channel& c, const JobRequest& req, int world,
                             const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             const Progress& progress, const std::string& to) {
  const std::uint64_t total = req.q_bytes() + 2 * req.kv_bytes();
  std::uint64_t sent = 0;
  auto last = Clock::now();
  for (int i = 1; i <= world; ++i) {
    const Positions pos = shard_positions(req.layout, req.tokens, world, i % world);
    const auto runs = shard_row_runs(pos);
    for (int part = 0; part < 3; ++part) {
      const std::int64_t width = (part == 2 ? req.heads : req.kv_heads) * req.head_dim;
      const std::vector<float>& all = part == 0 ? k : part == 1 ? v : q;
      std::vector<std::span<const std::byte>> pieces;  // the shard's row runs, in place
      std::uint64_t bytes = 0;
      for (const auto& run : runs) {
        pieces.push_back(std::as_bytes(std::span(all.data() + run.begin * width, static_cast<std::size_t>((run.end - run.begin) * width))));
        bytes += pieces.back().size();
      }
      co_await c.write_tensor(std::move(pieces), [&](std::uint64_t done) {
        if (Clock::now() - last < std::chrono::milliseconds(200)) return;
        last = Clock::now();
        progress.line("submit: sending Q, K, V to " + to + ": " + mib(sent + done) + " of " + mib(total));
      });
      sent += bytes;
    }
  }
  progress.line("submit: sent Q, K, V to " + to + ": " + mib(total));
}

asio::awaitable<void> converse(std::string to, const std::string& secret, bool tls, Millis idle, const JobRequest& req,
                               const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                               std::vector<float>& o, std::vector<float>& lse, const Progress& progress, Outcome& out) {
  for (int hops = 0;; ++hops) {
    auto c = co_await connect_control(to, secret, tls, idle);
    out.daemon = to;
    co_await c.write_json(job_request_json(req));
    int world = 0;
    bool redirected = false;
    for (;;) {
      const infer::Json e = infer::parse_json(co_await c.read_json());
      const std::string name = text(e, "event");
      const infer::Json* d = infer::json_field(e, "data");
      static const infer::Json empty;
      const infer::Json& data = d ? *d : empty;
      if (name == "redirect") {  // before anything is queued or sent
        const std::string next = text(data, "to");
        if (hops >= 2 || next.empty()) throw NetworkError("the daemons redirect in a loop; submit to rank 0", FailureCause::protocol);
        progress.line("submit: " + to + " is rank " + std::to_string(static_cast<int>(number(data, "rank"))) +
                      ", not rank 0; sending to rank 0 at " + next);
        to = next;
        redirected = true;
        break;
      }
      if (name == "queued") {
        out.job = static_cast<std::uint64_t>(number(data, "job"));
        out.dtype = text(data, "dtype");
        progress.line("submit: job " + std::to_string(out.job) + " queued at position " +
                      std::to_string(static_cast<int>(number(data, "position"))) + " (ring " + text(data, "ring") + ")");
      } else if (name == "upload") {  // the ring is ours: the shards, workers' first
        world = static_cast<int>(number(data, "world"));
        if (world < 1 || world > 4096) throw NetworkError(c.peer() + ": bad world size in its upload request", FailureCause::protocol);
        const auto t = Clock::now();
        co_await upload(c, req, world, q, k, v, progress, to);
        out.upload_seconds = since(t);
      } else if (name == "started") {
        progress.line("submit: job " + std::to_string(out.job) + " running on " +
                      std::to_string(static_cast<int>(number(data, "ranks"))) + " ranks: " + text(data, "shape"));
      } else if (name == "step") {
        progress.line("submit: job " + std::to_string(out.job) + ": ring step " +
                      std::to_string(static_cast<int>(number(data, "step"))) + "/" +
                      std::to_string(static_cast<int>(number(data, "of"))) + " on rank 0");
      } else if (name == "node_done") {
        out.nodes.push_back(to_object(data));
        char b[160];
        std::snprintf(b, sizeof b, "submit: job %llu: rank %d done, %d steps in %.3f s (%.3f s exposed wait)",
                      static_cast<unsigned long long>(out.job), static_cast<int>(number(data, "rank")),
                      static_cast<int>(number(data, "steps")), number(data, "seconds"), number(data, "wait_seconds"));
        progress.line(b);
      } else if (name == "done") {
        out.seconds = number(data, "seconds");
        out.ring_seconds = number(data, "ring_seconds");
        break;
      } else if (name == "error") {
        const int rank = static_cast<int>(number(data, "rank"));
        const std::string cause = text(data, "cause");
        FailureCause fc = FailureCause::unknown;
        for (int i = 0; i <= 7; ++i)
          if (to_string(static_cast<FailureCause>(i)) == cause) fc = static_cast<FailureCause>(i);
        progress.line("", true);
        const std::string what = out.job ? "job " + std::to_string(out.job) + " " + text(data, "result") : c.peer() + " refused the job";
        throw NetworkError(what + (rank >= 0 ? " on rank " + std::to_string(rank) : std::string()) + " (" + cause +
                               "): " + text(data, "message"),
                           fc, rank);
      }  // "alive": the daemon is there; nothing to show
    }
    if (redirected) continue;
    if (world == 0) throw NetworkError(c.peer() + ": the job ended without asking for its inputs", FailureCause::protocol);
    // Every rank's rows of O and lse, in rank order.
    const auto t1 = Clock::now();
    const std::int64_t qw = req.heads * req.head_dim, w = qw + req.heads;
    std::vector<float> rows;
    for (int r = 0; r < world; ++r) {
      const Positions pos = shard_positions(req.layout, req.tokens, world, r);
      rows.resize(static_cast<std::size_t>(pos.size() * w));
      co_await c.read_tensor(std::as_writable_bytes(std::span(rows)));
      scatter_rows(rows, w, 0, qw, pos, o);
      if (req.want_lse) scatter_rows(rows, w, qw, req.heads, pos, lse);
    }
    out.download_seconds = since(t1);
    progress.line("", true);
    co_return;
  }
}

int run_submit(const cli::Args& a) {
  const Progress progress{!a.quiet() && !a.has("json")};
  const Millis idle(static_cast<std::int64_t>(a.seconds("timeout", 0.001, 86400) * 1000));  // options before files
  node::JobSpec spec;
  spec.q_path = a.str("q");
  spec.k_path = a.str("k");
  spec.v_path = a.str("v");
  // The shapes agree, before anything is read or sent. (That check builds a kernel to
  // validate heads and head_dim; the client runs none, so its ISA line is not news.)
  if (log_level() <= LogLevel::info) set_log_level("kern", LogLevel::warn);
  node::inspect_inputs(spec);
  const std::string out_path = a.str("out");
  const std::string lse_path = a.maybe("lse").value_or("");
  run::check_output_paths(out_path, lse_path, {spec.q_path, spec.k_path, spec.v_path});

  JobRequest req;
  req.tokens = spec.tokens;
  req.heads = spec.attention.heads;
  req.kv_heads = spec.attention.kv_heads;
  req.head_dim = spec.attention.head_dim;
  req.layout = parse_layout(a.str("layout"));
  req.dtype_given = a.has("dtype");
  if (req.dtype_given) req.dtype = parse_dtype(a.str("dtype"));
  if (a.has("window")) req.mask = Mask::sliding_window(a.int64("window"));
  else if (a.has("causal")) req.mask = Mask::causal();
  req.want_lse = !lse_path.empty();

  auto read = [&](const std::string& path, const char* heads) {
    io::NpyReader r(path);
    std::vector<float> t = r.read_all();
    const io::RowRange all{0, r.info().shape[0]};
    io::check_finite(path, t, std::span(&all, 1), r.info(), heads);
    return t;
  };
  const std::vector<float> q = read(spec.q_path, "head"), k = read(spec.k_path, "kv head"), v = read(spec.v_path, "kv head");
  std::vector<float> o(static_cast<std::size_t>(req.tokens * req.heads * req.head_dim));
  std::vector<float> lse(req.want_lse ? static_cast<std::size_t>(req.tokens * req.heads) : 0);

  const std::string secret = client_secret(a.maybe("token-file"));
  Outcome out;
  const auto t0 = Clock::now();
  asio::io_context io;
  std::exception_ptr failure;
  asio::co_spawn(io, converse(a.str("to"), secret, a.has("tls"), idle, req, q, k, v, o, lse, progress, out),
                 [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) std::rethrow_exception(failure);
  const double total = since(t0);
  if (!out.dtype.empty()) req.dtype = parse_dtype(out.dtype);

  // All or nothing: both files are finished before either is published.
  io::NpyAtomicWriter wo(out_path, {req.tokens, req.heads, req.head_dim});
  wo.write_rows(io::RowRange{0, req.tokens}, o);
  std::optional<io::NpyAtomicWriter> wl;
  if (req.want_lse) {
    wl.emplace(lse_path, std::vector<std::int64_t>{req.tokens, req.heads});
    wl->write_rows(io::RowRange{0, req.tokens}, lse);
    wl->finish();
  }
  wo.finish();
  wo.commit();
  if (wl) wl->commit();

  if (a.has("json")) {
    cli::JsonObject j;
    j.add("ok", true).add("command", "submit").add("daemon", out.daemon).add("job", out.job).add("tokens", req.tokens);
    j.add("heads", req.heads).add("kv_heads", req.kv_heads).add("head_dim", req.head_dim);
    j.add("layout", to_string(req.layout)).add("mask", to_string(req.mask)).add("dtype", to_string(req.dtype));
    j.add("total_seconds", total).add("upload_seconds", out.upload_seconds).add("job_seconds", out.seconds);
    j.add("ring_seconds", out.ring_seconds).add("download_seconds", out.download_seconds);
    j.add("out", out_path).add("lse", lse_path).add("nodes", out.nodes);
    std::printf("%s\n", j.str().c_str());
  } else if (!a.quiet()) {
    std::printf("job %llu: %s -> %s%s\n  %.3f s total: upload %.3f s, job %.3f s (ring %.3f s on %zu ranks), download %.3f s\n",
                static_cast<unsigned long long>(out.job), req.describe().c_str(), out_path.c_str(),
                lse_path.empty() ? "" : (", " + lse_path).c_str(), total, out.upload_seconds, out.seconds,
                out.ring_seconds, out.nodes.size(), out.download_seconds);
  }
  return 0;
}

}  // namespace
}  // namespace ringattn::serve

int ringattn::cli::submit_main(const std::vector<std::string>& argv) {
  Args a("submit", "Sends one attention job to a ring of daemons (ringattn serve) and writes its output:\n"
                   "Q, K, V stream to the daemon, the ring computes exact attention, O (and lse) come back.");
  a.option("to", "HOST:PORT", "a daemon's control address (rank 0's, or any: the others redirect)")
      .option("q", "FILE", "queries, .npy [tokens, heads, head_dim]")
      .option("k", "FILE", "keys, .npy [tokens, kv_heads, head_dim]")
      .option("v", "FILE", "values, .npy [tokens, kv_heads, head_dim]")
      .option("out", "FILE", "O, written all-or-nothing: .npy [tokens, heads, head_dim]")
      .option("lse", "FILE", "also write the log-sum-exp, .npy [tokens, heads]")
      .flag("causal", "causal mask on the global token positions")
      .option("window", "W", "sliding window of W tokens (causal)")
      .option("layout", "L", "sharding of the token axis: contiguous, zigzag, striped", "zigzag")
      .option("dtype", "DTYPE", "kernel inputs and K/V on the wire: fp32 or bf16 (default: the daemons' wire_dtype)")
      .option("token-file", "FILE", "the daemons' shared secret, mode 0600 (default: RINGATTN_TOKEN_FILE or RINGATTN_TOKEN)")
      .flag("tls", "TLS 1.3 to the daemon (the daemons must run with --tls)")
      .option("timeout", "S", "seconds the daemon may stay silent before the job counts as lost", "60")
      .flag("json", "print one JSON object on stdout and nothing else (also on failure: \"ok\": false)");
  a.epilogue("Progress goes to stderr: the upload, the queue position, ring steps on rank 0, each rank's finish.\n"
             "Errors name the rank and the cause; O and lse are written only when the whole job succeeded.");
  if (!a.parse(argv)) return 0;
  return json_on_failure(argv, "submit", [&] { return serve::run_submit(a); });
}
