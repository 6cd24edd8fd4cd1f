// `ringattn bench transport` — a raw stream of K/V-sized blocks between two transports,
// the way the ring moves them (isend/irecv, `depth` frames in flight, CRC32C checked by
// the receiver, the sender passing a known CRC as a relaying rank does), against iperf3
// on the same link in the same run.
//
// In-process (default): ranks 0 (sender) and 1 (receiver) are two transports in threads of
// this process on --host. Two processes: `--role send|recv --port P --peer host:Q` on each
// side (the same --block-bytes/--reps/--seconds on both; secret from RINGATTN_TOKEN or
// --token-file); the receiver prints the results.
//
// GB/s is payload bytes (1e9) per second at the receiver, from the completion of a
// repetition's first frame to that of its last; the median over --reps repetitions after
// one warm-up. CPU s/GB is the transport I/O thread's CPU time (CLOCK_THREAD_CPUTIME_ID)
// per GB moved: what TCP plus the CRC (and, with --tls, the AES-GCM of TLS 1.3) cost the
// node. By default every block size is measured without and with TLS in the same run. One
// JSON object per line on stdout, each with the command that made it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../common/machine.hpp"
#include "../common/shell_command.hpp"
#include "../../src/cli/stats.hpp"
#include "iperf3.hpp"
#include "raw_tcp.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/link_probe.hpp"
#include "ringattn/error.hpp"
#include "../../src/cli/log.hpp"
#include "../../src/cli/args.hpp"
#include "../../src/cli/json_object.hpp"

namespace ringattn::cli {
int bench_transport_main(const std::vector<std::string>& argv);
}

namespace {

using namespace ringattn;
using cli::median;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kRowBytes = kLinkProbeRowBytes;  // K and V of one token: one KV head of 128, fp32


struct Plan {
  std::string command;  // recorded in every row
  std::vector<std::uint64_t> block_bytes;
  int reps = 5;
  double seconds = 1.0;       // per repetition, unless count > 0
  std::int64_t count = 0;     // frames per repetition
  int depth = 2;
};

// What the receiver measured for one block size.
struct Result {
  std::vector<double> gbps;
  std::vector<double> recv_cpu_per_gb, send_cpu_per_gb;
  std::uint64_t frames = 0;
};

// Sends warm-up + reps repetitions of frames of `bytes`; returns per-rep CPU s/GB.
std::vector<double> send_stream(LinkProbe& end, const Plan& p, std::uint64_t bytes) {
  std::vector<double> cpu_per_gb;
  for (int rep = 0; rep <= p.reps; ++rep) {  // rep 0 is the warm-up
    const LinkStream s = end.send(bytes, p.count, rep == 0 ? std::min(0.3, p.seconds) : p.seconds);
    if (rep > 0) cpu_per_gb.push_back(s.io_cpu_seconds / (static_cast<double>(s.frames * bytes) / 1e9));
  }
  return cpu_per_gb;
}

// Receives what send_stream sends: GB/s from the first frame's arrival to the last's.
Result recv_stream(LinkProbe& end, const Plan& p, std::uint64_t bytes) {
  Result res;
  for (int rep = 0; rep <= p.reps; ++rep) {
    const LinkStream s = end.receive(bytes);
    const double gb = static_cast<double>((s.frames - 1) * bytes) / 1e9;
    if (rep > 0) {
      res.gbps.push_back(gb / s.seconds);
      res.recv_cpu_per_gb.push_back(s.io_cpu_seconds / gb);
      res.frames += s.frames;
    }
  }
  return res;
}

// Same-run baselines of the in-process mode.
struct Baselines {
  std::optional<double> iperf3;     // GB/s, one line for the whole run
  std::optional<double> raw_tcp;    // GB/s, per block size
};

void print_result(const std::string& mode, const std::string& host, const Plan& p, std::uint64_t bytes, const Result& r,
                  const Baselines& base, bool tls, std::optional<double> plain_gbps = {}) {
  const double g = cli::median(r.gbps);
  cli::JsonObject o;
  o.add("bench", "transport").add("machine", bench::machine()).add("mode", mode).add("host", host).add("tls", tls);
  o.add("block_bytes", bytes).add("depth", p.depth).add("reps", p.reps).add("frames", r.frames);
  o.add("gb_per_s", g).add("gb_per_s_reps", r.gbps).add("recv_cpu_s_per_gb", cli::median(r.recv_cpu_per_gb));
  if (plain_gbps) o.add("plain_gb_per_s", *plain_gbps).add("ratio_vs_plain", g / *plain_gbps);
  if (!r.send_cpu_per_gb.empty()) o.add("send_cpu_s_per_gb", cli::median(r.send_cpu_per_gb));
  o.add("sender_crc", "precomputed").add("receiver_crc", "checked");
  if (base.raw_tcp) o.add("raw_tcp_gb_per_s", *base.raw_tcp).add("ratio_vs_raw_tcp", g / *base.raw_tcp);
  if (base.iperf3) o.add("iperf3_gb_per_s", *base.iperf3).add("ratio_vs_iperf3", g / *base.iperf3);
  o.add("command", p.command);
  std::printf("%s\n", o.str().c_str());
  std::fflush(stdout);
}

std::vector<std::int64_t> parse_counts(const std::string& list, const std::string& what) {
  std::vector<std::int64_t> out;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    out.push_back(cli::parse_count(list.substr(start, comma - start), what));
    start = comma + 1;
  }
  return out;
}

// ---- modes ------------------------------------------------------------------------------------

LinkProbeOptions end_options(int rank, const Plan& p, const std::string& host, std::uint16_t port, std::string secret,
                             bool tls) {
  LinkProbeOptions o;
  o.rank = rank;
  o.host = host;
  o.port = port;
  o.token = std::move(secret);
  o.tls = tls;
  o.max_block_bytes = *std::max_element(p.block_bytes.begin(), p.block_bytes.end());
  o.depth = p.depth;
  return o;
}

// One sender/receiver pair in this process, connected.
struct Pair {
  std::unique_ptr<LinkProbe> sender, receiver;
  bool tls;

  Pair(const Plan& p, const std::string& host, bool with_tls) : tls(with_tls) {
    const std::string secret = generate_token();
    sender = std::make_unique<LinkProbe>(end_options(0, p, host, 0, secret, tls));
    receiver = std::make_unique<LinkProbe>(end_options(1, p, host, 0, secret, tls));
    const std::vector<HostPort> peers = {{host, sender->listen_port()}, {host, receiver->listen_port()}};
    std::exception_ptr send_error;
    std::thread connect_sender([&] {
      try {
        sender->connect(peers);
      } catch (...) {
        send_error = std::current_exception();
      }
    });
    receiver->connect(peers);
    connect_sender.join();
    if (send_error) std::rethrow_exception(send_error);
  }
  ~Pair() {
    receiver->close();  // first: its posted receives are expected leftovers, not a failure
    sender->close();
  }

  Result stream(const Plan& p, std::uint64_t bytes) {
    std::vector<double> send_cpu;
    std::exception_ptr send_error;
    std::thread s([&] {
      try {
        send_cpu = send_stream(*sender, p, bytes);
      } catch (...) {
        send_error = std::current_exception();
      }
    });
    Result r;
    try {
      r = recv_stream(*receiver, p, bytes);
    } catch (...) {
      sender->close();  // unblocks the sender thread
      s.join();
      throw;
    }
    s.join();
    if (send_error) std::rethrow_exception(send_error);
    r.send_cpu_per_gb = send_cpu;
    return r;
  }
};

// For every block size: the plain transport, TLS when asked, then the plain-TCP
// baseline, one after the other in this run, so their ratios compare like with like.
int run_in_process(const Plan& p, const std::string& host, bool with_raw, std::optional<double> iperf,
                   const std::vector<bool>& tls_modes) {
  std::vector<std::unique_ptr<Pair>> pairs;
  for (bool tls : tls_modes) pairs.push_back(std::make_unique<Pair>(p, host, tls));
  for (auto bytes : p.block_bytes) {
    std::optional<double> raw;
    if (with_raw) raw = cli::median(bench::raw_tcp_gbps(host, bytes, p.depth, p.reps, p.seconds));
    std::optional<double> plain;
    for (auto& pair : pairs) {
      cli::logger("bench")->info("{}-byte blocks, {} reps{}", bytes, p.reps, pair->tls ? ", TLS" : "");
      const Result r = pair->stream(p, bytes);
      print_result("in-process", host, p, bytes, r, Baselines{iperf, raw}, pair->tls, pair->tls ? plain : std::nullopt);
      if (!pair->tls) plain = cli::median(r.gbps);
    }
  }
  return 0;
}

int run_two_process(const Plan& p, const std::string& role, const std::string& host, std::int64_t port,
                    const std::string& peer, const std::string& token_file, bool tls) {
  if (role != "send" && role != "recv") throw InvalidArgument("--role must be send or recv, got '" + role + "'");
  if (port < 1 || port > 65535) throw InvalidArgument("--role needs --port (1..65535) to listen on");
  const int rank = role == "send" ? 0 : 1;
  set_log_rank(rank);
  LinkProbe end(end_options(rank, p, host, static_cast<std::uint16_t>(port), load_token(token_file), tls));
  std::vector<HostPort> ends(2);
  ends[static_cast<std::size_t>(1 - rank)] = parse_host_port(peer, "--peer");
  ends[static_cast<std::size_t>(rank)] = {host, static_cast<std::uint16_t>(port)};
  end.connect(ends);
  for (auto bytes : p.block_bytes) {
    if (rank == 0) {
      send_stream(end, p, bytes);
    } else {
      print_result("two-process", host, p, bytes, recv_stream(end, p, bytes), Baselines{}, tls);
    }
  }
  end.close();
  return 0;
}

}  // namespace

int ringattn::cli::bench_transport_main(const std::vector<std::string>& argv) {
  Args a("bench transport",
         "Streams K/V-sized blocks between two transports (two threads here, or two processes with --role)\n"
         "and prints GB/s (median of --reps) and the I/O thread's CPU seconds per GB, beside two baselines\n"
         "of the same run: plain blocking TCP with the same buffers (the transport's own cost) and iperf3\n"
         "(when /usr/bin/iperf3 exists). One JSON object per line.");
  a.option("block-bytes", "LIST", "block sizes (K and V together), multiples of 1k: 256k,1M,...", "256k,1M,8M,32M")
      .option("seconds", "S", "length of each repetition", "1")
      .option("count", "N", "frames per repetition instead of --seconds")
      .option("reps", "N", "timed repetitions (after one warm-up)", "5")
      .option("depth", "N", "frames in flight (2 = the ring's double buffering)", "2")
      .option("host", "ADDR", "address to listen on (and of iperf3)", "127.0.0.1")
      .option("iperf-len", "BYTES", "iperf3 write size (-l)", "1M")
      .flag("no-iperf", "skip the iperf3 baseline")
      .flag("no-raw", "skip the plain-TCP baseline")
      .option("role", "send|recv", "run one side of a two-process measurement")
      .option("port", "N", "with --role: port to listen on")
      .option("peer", "HOST:PORT", "with --role: the other side's address")
      .option("token-file", "FILE", "with --role: shared secret file (else RINGATTN_TOKEN)")
      .option("tls", "off|on|both", "encryption in transit: both measures plain and TLS in this run (--role: off or on)", "both");
  if (!a.parse(argv)) return 0;
  Plan p;
  p.command = bench::shell_command("bench transport", argv);
  for (const auto& item : parse_counts(a.str("block-bytes"), "--block-bytes")) {
    if (item < static_cast<std::int64_t>(kRowBytes) || item % static_cast<std::int64_t>(kRowBytes) != 0)
      throw InvalidArgument("--block-bytes values must be positive multiples of " + std::to_string(kRowBytes) +
                            ", got " + std::to_string(item));
    p.block_bytes.push_back(static_cast<std::uint64_t>(item));
  }
  p.reps = a.integer("reps", 1, 1 << 20);
  p.seconds = a.seconds("seconds", 0.001, 3600);
  p.depth = a.integer("depth", 1, 1 << 10);
  if (auto c = a.maybe("count")) p.count = cli::parse_count(*c, "--count");
  const std::string host = a.str("host");
  const std::string tls = a.str("tls");
  if (tls != "off" && tls != "on" && tls != "both") throw InvalidArgument("--tls must be off, on or both, got '" + tls + "'");
  if (auto role = a.maybe("role")) {
    if (tls == "both") throw InvalidArgument("--role measures one side of one mode: --tls off or --tls on");
    return run_two_process(p, *role, host, a.has("port") ? a.integer<std::int64_t>("port", 1, 65535) : 0, a.str("peer"),
                           a.maybe("token-file").value_or(""), tls == "on");
  }
  std::optional<double> iperf;
  if (!a.has("no-iperf")) {
    const int secs = std::max(1, static_cast<int>(p.seconds + 0.5));
    iperf = bench::iperf3_gbps(host, p.reps, secs, a.str("iperf-len"));
    if (iperf)
      std::printf("{\"bench\":\"iperf3\",\"host\":\"%s\",\"write_bytes\":\"%s\",\"runs\":%d,\"seconds_per_run\":%d,"
                  "\"gb_per_s\":%.3f}\n",
                  host.c_str(), a.str("iperf-len").c_str(), p.reps, secs, *iperf);
    else
      cli::logger("bench")->warn("no iperf3 baseline ({} missing or failing)", bench::kIperf3Path);
  }
  std::vector<bool> modes;
  if (tls != "on") modes.push_back(false);
  if (tls != "off") modes.push_back(true);
  return run_in_process(p, host, !a.has("no-raw"), iperf, modes);
}
