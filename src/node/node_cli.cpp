// `ringattn node` — one member of the ring. Reads its shard of Q, K, V from the .npy
// inputs, joins the ring, runs the forward pass and writes its shard of O and lse.
//
// Two ways to learn the peers:
//   --peers -             (started by `ringattn run`) bind any free port, print
//                         "PORT <n>" on stdout, read "PEERS host:port,..." from stdin
//   --peers h:p,h:p,...   (a rack) every rank's address; it listens on its own entry
//                         (or on --listen)
// With --token-file - the token arrives on stdin too ("TOKEN ..."), so it survives a
// launcher that drops the environment (ssh, env -i). Whenever stdin carries the
// launcher's lines, it stays open, and its end stops the node (launcher_channel.hpp).
// Lines on stdout are the report of report.hpp: IDENT, PORT, ALIVE, then STATS on
// success or FAIL on failure, with a one-line error on stderr and a non-zero exit.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ringattn/split.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/error.hpp"
#include "../cli/log.hpp"
#include "../cli/json_object.hpp"
#include "../cli/peak_rss.hpp"
#include "../io/finite_check.hpp"
#include "../io/npy_reader.hpp"
#include "../io/npy_writer.hpp"
#include "fault.hpp"
#include "heartbeat.hpp"
#include "decode_job.hpp"
#include "job.hpp"
#include "launcher_channel.hpp"
#include "memory_budget.hpp"
#include "report.hpp"
#include "ringattn/ring.hpp"

namespace ringattn::cli {
int node_main(const std::vector<std::string>& argv);
}

namespace ringattn::node {
namespace {

// Work done outside the transport (reading inputs, writing outputs), for the heartbeat.
std::atomic<std::uint64_t> g_io_progress{0};

// Reads this rank's rows of one input tensor into `dst`, converted to the attention
// dtype. fp32 goes straight into dst; bf16 through a bounded staging buffer, so the
// node never holds a second full copy of a shard. NaN and inf are refused (in fp32, before
// any rounding), naming the token and the `head_name` ("head", "kv head") they are in.
void read_shard(const std::string& path, const Positions& pos, DType dtype, std::span<std::byte> dst,
                std::string_view head_name = "head") {
  io::NpyReader r(path);
  const std::size_t width = r.info().row_elements();
  if (dst.size() != static_cast<std::size_t>(pos.size()) * width * dtype_size(dtype))
    throw InvalidArgument(path + ": internal: shard buffer has the wrong size");
  const std::size_t batch_rows = std::max<std::size_t>(1, (std::size_t{4} << 20) / (width * 4));
  std::vector<float> stage;
  std::size_t done = 0;  // rows written to dst
  std::vector<io::RowRange> batch;
  std::size_t in_batch = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    if (dtype == DType::f32) {
      const std::span<float> rows(reinterpret_cast<float*>(dst.data()) + done * width, in_batch * width);
      r.read_ranges(batch, rows);
      io::check_finite(path, rows, batch, r.info(), head_name);
    } else {
      stage.resize(in_batch * width);
      r.read_ranges(batch, stage);
      io::check_finite(path, stage, batch, r.info(), head_name);
      to_bf16(stage.data(), reinterpret_cast<std::uint16_t*>(dst.data()) + done * width,
              static_cast<std::int64_t>(stage.size()));
    }
    done += in_batch;
    batch.clear();
    in_batch = 0;
    g_io_progress.fetch_add(1, std::memory_order_relaxed);
  };
  for (auto run : shard_row_runs(pos)) {  // split the runs into batches of at most batch_rows rows
    while (run.begin < run.end) {
      const auto take = std::min<std::int64_t>(run.end - run.begin, static_cast<std::int64_t>(batch_rows - in_batch));
      batch.push_back({run.begin, run.begin + take});
      in_batch += static_cast<std::size_t>(take);
      run.begin += take;
      if (in_batch == batch_rows) flush();
    }
  }
  flush();
}


std::string json_stats(int rank, std::int64_t rows, const ForwardStats& s, const RingTraffic& t, Isa isa) {
  cli::JsonObject o;
  o.add("rank", rank).add("rows", rows).add("total_seconds", s.seconds).add("compute_seconds", s.compute_seconds);
  o.add("wait_seconds", s.wait_seconds).add("useful_flops", s.useful_flops).add("steps", s.steps);
  o.add("steps_skipped", s.steps_skipped).add("payload_bytes_sent", s.bytes_sent).add("bytes_sent", t.bytes_sent);
  o.add("io_cpu_seconds", t.io_cpu_seconds).add("max_rss_kib", static_cast<std::int64_t>(cli::peak_rss_kib()));
  o.add("isa", to_string(isa));
  return o.str();
}

// RINGATTN_FAULT's ring faults, played by the library (Ring::inject_fault); silent,
// token and shape are played by this program before the ring exists.
void install_fault(Ring& ring, const Fault& fault, double timeout_seconds) {
  switch (fault.kind) {
    case Fault::Kind::exit: return ring.inject_fault(Ring::Fault::exit, fault.step);
    case Fault::Kind::hang: return ring.inject_fault(Ring::Fault::hang, fault.step);
    case Fault::Kind::slow: return ring.inject_fault(Ring::Fault::slow, fault.step, 3 * timeout_seconds);
    case Fault::Kind::corrupt: return ring.inject_fault(Ring::Fault::corrupt, fault.step);
    default: return;
  }
}

int run_node(const cli::Args& a, int rank) {
  JobSpec job;
  job.q_path = a.str("q");
  job.k_path = a.str("k");
  job.v_path = a.str("v");
  read_job_options(a, job);
  if (rank < 0 || rank >= job.nodes)
    throw InvalidArgument("--rank = " + std::to_string(rank) + " is outside 0.." + std::to_string(job.nodes - 1));
  set_log_rank(rank);
  const auto fault = fault_for_rank(rank);
  inspect_inputs(job);
  check_memory(job, 1, "rank " + std::to_string(rank) + ": ");
  const std::string out_dir = a.str("out-dir");
  const std::string token_arg = a.maybe("token-file").value_or("");
  const auto master = a.maybe("master");
  std::unique_ptr<LauncherChannel> launcher;
  if (master || token_arg == "-") launcher = std::make_unique<LauncherChannel>(rank);

  RingOptions ro = ring_options(job, rank);
  ro.ring_id = a.integer<std::uint64_t>("ring-id", 0, INT64_MAX);
  ro.tls = a.has("tls");
  if (fault && fault->kind == Fault::Kind::shape) ro.job_digest ^= 1;
  if (job.nodes > 1) {
    ro.token = token_arg == "-" ? checked_token(launcher->token(job.timeout_seconds), "the launcher's pipe")
                                : load_token(token_arg);
    if (fault && fault->kind == Fault::Kind::token) ro.token += "-not-the-ring-secret";
  }
  emit_line(ident_line({ro.fingerprint(),
                        job.nodes > 1 ? token_fingerprint(ro.token) : ""}));
  if (master) {  // the launcher's rendezvous
    ro.master = *master;
    ro.master_is_external = true;
  } else if (auto peers = a.maybe("peers")) {
    ro.peers = split_commas(*peers);
    if (static_cast<int>(ro.peers.size()) != job.nodes)
      throw InvalidArgument("--peers lists " + std::to_string(ro.peers.size()) + " addresses but --nodes is " +
                            std::to_string(job.nodes));
    // Listen where the peers will dial this rank (its own entry), unless told otherwise.
    // The library listens on this rank's own entry (resolved), unless told otherwise.
    if (a.has("listen")) ro.listen = a.str("listen");
  } else if (job.nodes > 1) {
    throw InvalidArgument("--peers (every rank's host:port) or --master (a rendezvous) is required with --nodes > 1");
  }

  std::atomic<const Ring*> live_ring{nullptr};
  std::optional<Heartbeat> heartbeat;
  if (launcher)
    heartbeat.emplace(std::chrono::milliseconds(static_cast<std::int64_t>(job.timeout_seconds * 500)), [&] {
      const Ring* r = live_ring.load();
      return g_io_progress.load() + (r ? r->progress() : 0);
    });

  // Inputs first: a bad file must fail before this rank makes its peers wait.
  const JobShard shard = job_shard(job, rank);
  const Positions& pos = shard.positions;
  const auto& c = job.attention;
  const std::size_t rows = static_cast<std::size_t>(pos.size());
  std::vector<float> q(rows * static_cast<std::size_t>(c.heads * c.head_dim));
  std::vector<float> k(rows * static_cast<std::size_t>(c.kv_heads * c.head_dim)), v(k.size());
  read_shard(job.q_path, pos, DType::f32, std::as_writable_bytes(std::span(q)));
  read_shard(job.k_path, pos, DType::f32, std::as_writable_bytes(std::span(k)), "kv head");
  read_shard(job.v_path, pos, DType::f32, std::as_writable_bytes(std::span(v)), "kv head");
  if (fault && fault->kind == Fault::Kind::silent) {
    std::this_thread::sleep_for(std::chrono::duration<double>(job.timeout_seconds * 3));
    throw Error("fault injected: stayed silent instead of connecting");
  }
  Ring ring = Ring::connect(ro);
  live_ring = &ring;
  if (fault) install_fault(ring, *fault, job.timeout_seconds);

  const auto positions = pos.materialize();
  std::vector<float> o(rows * static_cast<std::size_t>(c.heads * c.head_dim)), lse(rows * static_cast<std::size_t>(c.heads));
  const ForwardStats stats = job.decode_steps > 0 ? run_decode_job(ring, job, shard, q, k, v, o, lse)
                             : job.cu_seqlens.empty()
                                 ? ring.forward({attention_spec(job), q, k, v, positions}, o, lse)
                                 : ring.forward({attention_spec(job), q, k, v, positions, shard.documents}, o, lse);
  const RingTraffic tstats = ring.traffic();
  live_ring = nullptr;
  ring.close();
  heartbeat.reset();

  const std::string stem = out_dir + "/rank" + std::to_string(rank);
  const std::vector<std::int64_t> o_shape = {pos.size(), c.heads, c.head_dim};
  const std::vector<std::int64_t> lse_shape = {pos.size(), c.heads};
  io::write_npy_atomic(stem + ".o.npy", o_shape, o);
  io::write_npy_atomic(stem + ".lse.npy", lse_shape, lse);
  emit_line("STATS " + json_stats(rank, pos.size(), stats, tstats, ring.kernel_isa(attention_spec(job))));
  cli::logger("node")->info("done: {:.3f} s, {:.1f} GFLOP/s useful, {:.3f} s waiting on the ring", stats.seconds,
                       stats.useful_flops / stats.seconds / 1e9, stats.wait_seconds);
  return 0;
}

}  // namespace
}  // namespace ringattn::node

int ringattn::cli::node_main(const std::vector<std::string>& argv) {
  Args a("node", "One ring member: reads its shard of Q/K/V, runs the ring forward pass with its peers,\n"
                 "writes its shard of O and lse to --out-dir as rank<R>.o.npy and rank<R>.lse.npy.");
  a.option("rank", "R", "this node's rank, 0..nodes-1");
  node::declare_job_options(a, true);
  a.option("peers", "LIST", "host:port of every rank, comma-separated (a rack); or --master")
      .option("master", "HOST:PORT", "a rendezvous to learn the peers from (ringattn run serves one)")
      .option("listen", "HOST:PORT", "where to listen (default: this rank's own entry of --peers)")
      .option("out-dir", "DIR", "where to write this rank's output shard")
      .option("ring-id", "N", "id shared by the ring's nodes; nodes of another ring are refused", "0")
      .option("token-file", "FILE", "shared secret file, mode 0600 (default: environment RINGATTN_TOKEN; '-': a TOKEN line on stdin)")
      .flag("tls", "encrypt every connection (TLS 1.3 keyed by the token; every node needs it)");
  if (!a.parse(argv)) return 0;
  int rank = -1;
  try {
    rank = a.integer("rank", 0, 4095);  // below --nodes: run_node checks
    return node::run_node(a, rank);
  } catch (const std::exception& e) {
    // The launcher reads the structured report; the user reads main's one-line error.
    node::emit_line(node::fail_line(node::fail_report_for(e, rank)));
    const std::string m = e.what();
    const std::string who = "rank " + (rank >= 0 ? std::to_string(rank) : std::string("?")) + ": ";
    const std::string text = m.rfind("rank", 0) == 0 ? m : who + m;
    if (dynamic_cast<const InvalidArgument*>(&e)) throw InvalidArgument(text);
    if (const auto* n = dynamic_cast<const NetworkError*>(&e)) throw NetworkError(text, n->cause(), n->origin_rank());
    if (dynamic_cast<const FileError*>(&e)) throw FileError(text);
    if (dynamic_cast<const Error*>(&e)) throw Error(text);
    throw;
  }
}
