// `ringattn node` — one member of the ring. Reads its shard of Q, K, V from the .npy
// inputs, joins the ring, runs the forward pass and writes its shard of O and lse.
//
// Two ways to learn the peers:
//   --peers -             (started by `ringattn run`) bind any free port, print
//                         "PORT <n>" on stdout, read "PEERS host:port,..." from stdin
//   --peers h:p,h:p,...   (a rack) every rank's address; --listen says where to bind
// On success it prints one line "STATS {json}" on stdout. Any failure ends it with a
// non-zero exit and a one-line error naming this rank and the cause.
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "net/secret.hpp"
#include "net/transport.hpp"
#include "ringattn/error.hpp"
#include "ringattn/log.hpp"
#include "src/io/finite_check.hpp"
#include "src/io/npy_reader.hpp"
#include "src/io/npy_writer.hpp"
#include "src/node/fault.hpp"
#include "src/node/job.hpp"
#include "src/ring/kv_ring.hpp"

namespace ringattn::cli {
int node_main(const std::vector<std::string>& argv);
}

namespace ringattn::node {
namespace {

net::PeerAddress parse_address(const std::string& text, const std::string& what) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw InvalidArgument(what + ": expected host:port, got '" + text + "'");
  const auto port = cli::parse_count(text.substr(colon + 1), what + " port");
  if (port < 0 || port > 65535) throw InvalidArgument(what + ": port " + std::to_string(port) + " is out of range");
  return {text.substr(0, colon), static_cast<std::uint16_t>(port)};
}

std::vector<net::PeerAddress> parse_peers(const std::string& list, int world) {
  std::vector<net::PeerAddress> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    auto comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    out.push_back(parse_address(list.substr(start, comma - start), "--peers entry " + std::to_string(out.size())));
    start = comma + 1;
  }
  if (static_cast<int>(out.size()) != world)
    throw InvalidArgument("--peers lists " + std::to_string(out.size()) + " addresses but --nodes is " +
                          std::to_string(world));
  return out;
}

// One line from stdin within the deadline (the coordinator's PEERS line).
std::string read_line(double timeout_seconds) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) throw NetworkError("no PEERS line from the coordinator within " + std::to_string(timeout_seconds) + " s");
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n <= 0) throw NetworkError("the coordinator closed stdin before sending PEERS");
    if (c == '\n') return line;
    line.push_back(c);
    if (line.size() > 1 << 20) throw NetworkError("PEERS line from the coordinator is too long");
  }
}

// Reads this rank's rows of one input tensor into `dst`, converted to the attention
// dtype. fp32 goes straight into dst; bf16 through a bounded staging buffer, so the
// node never holds a second full copy of a shard. NaN and inf are refused (in fp32, before
// any rounding), naming the token and the `head_name` ("head", "kv head") they are in.
void read_shard(const std::string& path, const Positions& pos, DType dtype, std::span<std::byte> dst,
                std::string_view head_name = "head") {
  io::NpyReader r(path);
  const std::size_t width = r.info().row_elements();
  const std::size_t esz = dtype_size(dtype);
  if (dst.size() != static_cast<std::size_t>(pos.size()) * width * esz)
    throw InvalidArgument(path + ": internal: shard buffer has the wrong size");
  std::vector<io::RowRange> ranges;
  for (const auto& run : ring::shard_row_runs(pos)) ranges.push_back({run.begin, run.end});
  const std::size_t batch_rows = std::max<std::size_t>(1, (std::size_t{4} << 20) / (width * 4));
  std::vector<float> stage;
  std::size_t done = 0;  // rows written to dst
  // Split the runs into batches of at most batch_rows rows.
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
  };
  for (auto run : ranges) {
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

// Peak resident set of this process so far (inputs read, ring done, outputs written),
// so `bench ring` can check per-node memory without wrapping nodes in /usr/bin/time.
// VmHWM belongs to this process's own address space. getrusage's ru_maxrss (and so
// /usr/bin/time) is not: Linux carries it over fork and exec, so a node started by a
// process holding a lot of memory would report its parent's peak.
long peak_rss_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  if (f) std::fclose(f);
  if (kib < 0) {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    kib = ru.ru_maxrss;
  }
  return kib;
}

std::string json_stats(int rank, std::int64_t rows, const ring::RingForwardStats& s, const net::TransportStats& t,
                       Isa isa) {
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "{\"rank\":%d,\"rows\":%lld,\"total_seconds\":%.6f,\"compute_seconds\":%.6f,\"wait_seconds\":%.6f,"
                "\"useful_flops\":%.6g,\"steps\":%d,\"steps_skipped\":%d,\"payload_bytes_sent\":%llu,"
                "\"bytes_sent\":%llu,\"io_cpu_seconds\":%.6f,\"max_rss_kib\":%ld,\"isa\":\"%s\"}",
                rank, static_cast<long long>(rows), s.total_seconds, s.compute_seconds, s.wait_seconds, s.useful_flops,
                s.steps, s.steps_skipped, static_cast<unsigned long long>(s.payload_bytes_sent),
                static_cast<unsigned long long>(t.bytes_sent), t.io_cpu_seconds, peak_rss_kib(),
                std::string(to_string(isa)).c_str());
  return buf;
}

int run_node(const cli::Args& a) {
  JobSpec job;
  job.q_path = a.str("q");
  job.k_path = a.str("k");
  job.v_path = a.str("v");
  read_job_options(a, job);
  const int rank = static_cast<int>(a.int64("rank"));
  if (rank < 0 || rank >= job.nodes)
    throw InvalidArgument("--rank = " + std::to_string(rank) + " is outside 0.." + std::to_string(job.nodes - 1));
  set_log_rank(rank);
  const auto fault = fault_for_rank(rank);
  inspect_inputs(job);
  const std::string out_dir = a.str("out-dir");

  net::TransportConfig tc;
  tc.rank = rank;
  tc.world = job.nodes;
  tc.ring_id = static_cast<std::uint64_t>(a.int64("ring-id"));
  tc.shape = ring::ring_job_shape(job.attention, job.layout, job.tokens, job.nodes);
  if (fault && fault->kind == Fault::Kind::shape) tc.shape.options_digest ^= 1;
  if (job.nodes > 1) {
    tc.secret = net::load_secret(a.maybe("token-file").value_or(""));
    if (fault && fault->kind == Fault::Kind::token) tc.secret += "-not-the-ring-secret";
  }
  tc.connect_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(job.timeout_seconds * 1000));
  tc.io_timeout = tc.connect_timeout;
  const std::string peers_arg = a.str("peers");
  const bool coordinated = peers_arg == "-";
  if (!coordinated) {
    const auto listen = parse_address(a.str("listen"), "--listen");
    tc.listen_host = listen.host;
    tc.listen_port = listen.port;
  }

  // Inputs first: a bad file must fail before this rank makes its peers wait.
  const Positions pos = ring::shard_positions(job.layout, job.tokens, job.nodes, rank);
  std::vector<std::byte> q(static_cast<std::size_t>(pos.size() * job.attention.heads * job.attention.head_dim) *
                           dtype_size(job.attention.dtype));
  read_shard(job.q_path, pos, job.attention.dtype, q);
  BlockAttention attn(job.attention);

  auto transport = net::make_tcp_transport(tc);
  // K and V go straight into the ring's first transfer buffer.
  ring::KvRing ring(*transport, attn, job.layout, job.tokens);
  read_shard(job.k_path, pos, job.attention.dtype, ring.local_k(), "kv head");
  read_shard(job.v_path, pos, job.attention.dtype, ring.local_v(), "kv head");
  std::vector<net::PeerAddress> peers;
  if (coordinated) {
    std::printf("PORT %u\n", static_cast<unsigned>(transport->listen_port()));
    std::fflush(stdout);
    if (job.nodes > 1) {
      const std::string line = read_line(job.timeout_seconds);
      if (line.rfind("PEERS ", 0) != 0) throw NetworkError("expected 'PEERS ...' from the coordinator, got '" + line + "'");
      peers = parse_peers(line.substr(6), job.nodes);
    }
  } else {
    peers = parse_peers(peers_arg, job.nodes);
  }
  if (fault && fault->kind == Fault::Kind::silent) {
    std::this_thread::sleep_for(std::chrono::duration<double>(job.timeout_seconds * 3));
    throw Error("fault injected: stayed silent instead of connecting");
  }
  if (job.nodes > 1) transport->connect(peers);

  if (fault && (fault->kind == Fault::Kind::exit || fault->kind == Fault::Kind::hang ||
                fault->kind == Fault::Kind::corrupt)) {
    ring.set_step_hook([f = *fault](int step, std::span<std::byte> block) {
      if (step != f.step) return;
      if (f.kind == Fault::Kind::exit) {
        std::fprintf(stderr, "fault injected: exiting abruptly at step %d\n", step);
        ::_exit(17);
      }
      if (f.kind == Fault::Kind::hang) {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      if (!block.empty()) block[block.size() / 2] ^= std::byte{0x5a};
    });
  }
  OnlineSoftmaxState state(pos.size(), job.attention.heads, job.attention.head_dim);
  const auto stats = ring.forward(q.data(), ring.local_k().data(), ring.local_v().data(), state, tc.ring_id);
  const auto tstats = transport->stats();
  transport->close();

  std::vector<float> lse(state.m.size());
  finalize(state, state.o.data(), lse.data());  // in place: O overwrites o
  const auto& o = state.o;
  const std::string stem = out_dir + "/rank" + std::to_string(rank);
  const std::vector<std::int64_t> o_shape = {pos.size(), job.attention.heads, job.attention.head_dim};
  const std::vector<std::int64_t> lse_shape = {pos.size(), job.attention.heads};
  io::write_npy_atomic(stem + ".o.npy", o_shape, o);
  io::write_npy_atomic(stem + ".lse.npy", lse_shape, lse);
  std::printf("STATS %s\n", json_stats(rank, pos.size(), stats, tstats, attn.isa()).c_str());
  std::fflush(stdout);
  logger("node")->info("done: {:.3f} s, {:.1f} GFLOP/s useful, {:.3f} s waiting on the ring", stats.total_seconds,
                       stats.useful_flops / stats.total_seconds / 1e9, stats.wait_seconds);
  return 0;
}

}  // namespace
}  // namespace ringattn::node

int ringattn::cli::node_main(const std::vector<std::string>& argv) {
  Args a("node", "One ring member: reads its shard of Q/K/V, runs the ring forward pass with its peers,\n"
                 "writes its shard of O and lse to --out-dir as rank<R>.o.npy and rank<R>.lse.npy.");
  a.option("rank", "R", "this node's rank, 0..nodes-1");
  node::declare_job_options(a, true);
  a.option("peers", "LIST", "'-' (learn them from the coordinator) or host:port for every rank, comma-separated")
      .option("listen", "HOST:PORT", "where to listen with an explicit --peers list", "127.0.0.1:0")
      .option("out-dir", "DIR", "where to write this rank's output shard")
      .option("ring-id", "N", "id shared by the ring's nodes; nodes of another ring are refused", "0")
      .option("token-file", "FILE", "shared secret file (default: environment RINGATTN_TOKEN)");
  if (!a.parse(argv)) return 0;
  std::string rank = a.maybe("rank").value_or("?");
  try {
    return node::run_node(a);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("rank " + rank + ": " + e.what());
  } catch (const NetworkError& e) {
    const std::string m = e.what();
    throw NetworkError(m.rfind("rank", 0) == 0 ? m : "rank " + rank + ": " + m);
  } catch (const FileError& e) {
    throw FileError("rank " + rank + ": " + e.what());
  } catch (const Error& e) {
    throw Error("rank " + rank + ": " + e.what());
  }
}
