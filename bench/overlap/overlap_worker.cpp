#include "bench/overlap/overlap_worker.hpp"

#include <omp.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <utility>

#include "bench/overlap/overlap_model.hpp"
#include "net/crc32c.hpp"
#include "net/secret.hpp"
#include "net/transport.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "core/logger.hpp"
#include "src/ring/layout.hpp"

namespace ringattn::bench::overlap {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Frame markers: data frames and the all-reduce tokens are told apart by `step`.
constexpr std::uint64_t kDataJob = 0xDA7A;
constexpr std::uint64_t kTokenStep = 0xA11ED;

std::vector<net::PeerAddress> parse_peers(const std::string& list, int world) {
  std::vector<net::PeerAddress> out;
  std::size_t start = 0;
  while (start < list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    const auto colon = item.rfind(':');
    if (colon == std::string::npos) throw InvalidArgument("bench overlap: peer '" + item + "' is not host:port");
    const int port = std::atoi(item.c_str() + colon + 1);
    if (port < 0 || port > 65535) throw InvalidArgument("bench overlap: bad port in '" + item + "'");
    out.push_back({item.substr(0, colon), static_cast<std::uint16_t>(port)});
    start = comma + 1;
  }
  if (static_cast<int>(out.size()) != world)
    throw InvalidArgument("bench overlap: " + std::to_string(out.size()) + " peers listed for " +
                          std::to_string(world) + " nodes");
  return out;
}

void pin_to(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0)
    throw Error(std::string("bench overlap: cannot pin to CPUs: ") + std::strerror(errno));
}

// Random values of unit scale in the kernel's dtype, generated in chunks so that no
// fp32 copy of a large block is needed.
void fill_random(std::vector<std::byte>& out, DType dtype, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::size_t esz = dtype_size(dtype), n = out.size() / esz;
  std::vector<float> chunk(4096);
  for (std::size_t at = 0; at < n; at += chunk.size()) {
    const std::size_t m = std::min(chunk.size(), n - at);
    for (std::size_t i = 0; i < m; ++i) chunk[i] = nd(rng);
    if (dtype == DType::bf16)
      to_bf16(chunk.data(), reinterpret_cast<std::uint16_t*>(out.data()) + at, static_cast<std::int64_t>(m));
    else
      std::memcpy(out.data() + at * esz, chunk.data(), m * esz);
  }
}

AttentionConfig attention_config(const SweepSpec& spec, const std::string& mask) {
  AttentionConfig cfg;
  cfg.heads = spec.heads;
  cfg.kv_heads = spec.kv_heads;
  cfg.head_dim = spec.head_dim;
  cfg.dtype = spec.dtype;
  cfg.mask = mask == "causal" ? Mask::causal() : Mask::none();
  cfg.threads = spec.cores;
  return cfg;
}

// Rounds per block size: enough for min_seconds of the slower kind, at least five so a
// median has two samples on each side of it.
int reps_for(double estimate, const SweepSpec& spec) {
  const double n = std::ceil(spec.min_seconds / std::max(estimate, 1e-6));
  return static_cast<int>(std::clamp(n, 5.0, static_cast<double>(std::max(5, spec.max_reps))));
}

// One member's measurements for one mask and block size.
class BlockSweep {
 public:
  BlockSweep(net::RingTransport& t, const net::JobShape& shape, const SweepSpec& spec, BlockAttention& attn,
             const std::string& mask, std::int64_t b)
      : t_(t), shape_(shape), spec_(spec), attn_(attn), rank_(t.rank()), world_(t.world()), b_(b), src_(rank_) {
    const ring::Layout layout = mask == "causal" ? ring::Layout::zigzag : ring::Layout::contiguous;
    for (int r = 0; r < world_; ++r) pos_.push_back(ring::shard_positions(layout, b * world_, world_, r));
    const std::size_t esz = dtype_size(spec.dtype);
    row_bytes_ = static_cast<std::size_t>(spec.kv_heads * spec.head_dim) * esz;
    q_.resize(static_cast<std::size_t>(b * spec.heads * spec.head_dim) * esz);
    a_.resize(2 * static_cast<std::size_t>(b) * row_bytes_);
    b_buf_.resize(a_.size());
    fill_random(q_, spec.dtype, 1000 + static_cast<std::uint64_t>(rank_));
    fill_random(a_, spec.dtype, 2000 + static_cast<std::uint64_t>(rank_));
    crc_ = net::crc32c(a_);
    state_ = OnlineSoftmaxState(b, spec.heads, spec.head_dim);
    row_.mask = mask;
    row_.rank = rank_;
    row_.b = b;
    row_.block_bytes = static_cast<double>(a_.size());
  }

  // Rounds of the four step kinds, interleaved, so that a slow drift of the machine
  // (other load, a busy sibling CPU) touches every kind alike; medians over the rounds.
  StepRow run() {
    agree(t_, shape_, 0);
    state_.reset();
    Round warm = round();  // creates the kernel's primitives, sizes TCP's window
    // Cheap sizes get one more for a clean estimate; all members must agree on it.
    if (agree(t_, shape_, warm.compute < 0.05 ? 1 : 0)) warm = round();
    const int n = static_cast<int>(agree(
        t_, shape_, static_cast<std::uint64_t>(reps_for(std::max(warm.compute, warm.transfer), spec_))));
    std::vector<double> tc, tx, ts, to, tf;
    double flops = 0, fold_cpu = 0, fold_wall = 0, io_x = 0, io_o = 0;
    for (int i = 0; i < n; ++i) {
      const Round r = round();
      tc.push_back(r.compute);
      tx.push_back(r.transfer);
      ts.push_back(r.serial);
      to.push_back(r.overlap);
      tf.push_back(r.fold_in_overlap);
      flops += r.flops;
      fold_cpu += r.compute_cpu;
      fold_wall += r.compute;
      io_x += r.io_cpu_transfer;
      io_o += r.io_cpu_overlap;
    }
    row_.t_compute = median(tc);
    row_.t_transfer = median(tx);
    row_.t_serial = median(ts);
    row_.t_overlap = median(to);
    row_.t_fold_in_overlap = median(tf);
    row_.useful_flops = flops / n;
    row_.cpu_share = fold_cpu / (fold_wall * spec_.cores);
    row_.io_cpu_per_byte = io_x / (n * row_.block_bytes);
    row_.io_cpu_per_byte_overlap = io_o / (n * row_.block_bytes);
    row_.reps_compute = row_.reps_transfer = row_.reps_serial = row_.reps_overlap = n;
    return row_;
  }

  // Ring all-reduce (max) of a small number; also the barrier between phases. P−1
  // rounds of "send what I know to the successor, take the max with the predecessor's".
  static std::uint64_t agree(net::RingTransport& t, const net::JobShape& shape, std::uint64_t v) {
    const std::size_t token_bytes = net::kv_block_bytes(shape, 1);
    std::vector<std::byte> out(token_bytes), in(token_bytes);
    for (int round = 0; round + 1 < t.world(); ++round) {
      auto s = t.isend(net::kv_block_header(shape, v, kTokenStep, 1), out);
      auto r = t.irecv(in);
      t.wait(s);
      const net::FrameHeader h = t.wait(r);
      if (h.step != kTokenStep || h.rows != 1)
        throw NetworkError("rank " + std::to_string(t.rank()) + ": bench overlap: expected a barrier token, got step " +
                           std::to_string(h.step) + " with " + std::to_string(h.rows) + " rows");
      v = std::max(v, h.job_id);
    }
    return v;
  }

 private:
  struct Round {
    double compute = 0, transfer = 0, serial = 0, overlap = 0, fold_in_overlap = 0;
    double flops = 0, compute_cpu = 0, io_cpu_transfer = 0, io_cpu_overlap = 0;
  };

  double fold(double* flops = nullptr) {
    const auto t0 = Clock::now();
    const std::size_t half = static_cast<std::size_t>(b_) * row_bytes_;
    const FoldStats fs = attn_.fold(q_.data(), pos_[static_cast<std::size_t>(rank_)], a_.data(), a_.data() + half,
                                    pos_[static_cast<std::size_t>(src_)], state_);
    if (flops) *flops = fs.useful_flops;
    return since(t0);
  }

  void post_exchange() {
    send_ = t_.isend(net::kv_block_header(shape_, kDataJob, seq_++, static_cast<std::uint32_t>(b_)), a_, crc_);
    recv_ = t_.irecv(b_buf_);
  }

  // Completes the exchange the way KvRing does: check the frame, relay its CRC, swap.
  void finish_exchange() {
    t_.wait(send_);
    const net::FrameHeader h = t_.wait(recv_);
    if (h.kind != net::FrameKind::kv_block || h.job_id != kDataJob || h.rows != static_cast<std::uint32_t>(b_))
      throw NetworkError("rank " + std::to_string(rank_) + ": bench overlap: expected a " + std::to_string(b_) +
                         "-row block, got job " + std::to_string(h.job_id) + " with " + std::to_string(h.rows) + " rows");
    crc_ = h.payload_crc;
    std::swap(a_, b_buf_);
    src_ = (src_ - 1 + world_) % world_;  // A now holds the predecessor's block
  }

  double io_cpu() const { return t_.stats().io_cpu_seconds; }

  // One step of each kind. Every member runs the same sequence, so the exchanges pair up.
  Round round() {
    Round r;
    const double cpu0 = process_cpu_seconds();
    r.compute = fold(&r.flops);  // the kernel alone
    r.compute_cpu = process_cpu_seconds() - cpu0;

    double io0 = io_cpu();
    auto t0 = Clock::now();
    post_exchange();  // the transfer alone
    finish_exchange();
    r.transfer = since(t0);
    r.io_cpu_transfer = io_cpu() - io0;

    t0 = Clock::now();
    fold();  // compute, then transfer
    post_exchange();
    finish_exchange();
    r.serial = since(t0);

    io0 = io_cpu();
    t0 = Clock::now();
    post_exchange();  // the double-buffered step of KvRing::forward
    r.fold_in_overlap = fold();
    finish_exchange();
    r.overlap = since(t0);
    r.io_cpu_overlap = io_cpu() - io0;
    return r;
  }

  net::RingTransport& t_;
  const net::JobShape& shape_;
  const SweepSpec& spec_;
  BlockAttention& attn_;
  int rank_, world_;
  std::int64_t b_;
  int src_;  // whose block A holds
  std::vector<Positions> pos_;
  std::size_t row_bytes_ = 0;
  std::vector<std::byte> q_, a_, b_buf_;
  std::uint32_t crc_ = 0;
  OnlineSoftmaxState state_;
  net::Request send_, recv_;
  std::uint64_t seq_ = 0;
  StepRow row_;
};

net::JobShape sweep_shape(const SweepSpec& spec) {
  net::JobShape s;
  s.heads = static_cast<std::uint32_t>(spec.heads);
  s.kv_heads = static_cast<std::uint32_t>(spec.kv_heads);
  s.head_dim = static_cast<std::uint32_t>(spec.head_dim);
  s.max_block_rows = static_cast<std::uint32_t>(*std::max_element(spec.blocks.begin(), spec.blocks.end()));
  s.dtype = spec.dtype;
  // Every member must run the same sweep: its sizes and masks go into the digest.
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  for (auto b : spec.blocks) mix(static_cast<std::uint64_t>(b));
  for (const auto& m : spec.masks) mix(m == "causal" ? 2 : 1);
  s.options_digest = h;
  return s;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string s;
  for (int c : cpus) {
    if (!s.empty()) s += ',';
    s += std::to_string(c);
  }
  return s;
}

}  // namespace

std::vector<int> node_cpus(int rank, int cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> allowed;
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) allowed.push_back(c);
  if (allowed.empty()) allowed.push_back(0);
  std::vector<int> out;
  for (int i = 0; i < cores; ++i)
    out.push_back(allowed[static_cast<std::size_t>(rank * cores + i) % allowed.size()]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void run_member(const SweepSpec& spec, const MemberNet& mn) {
  set_log_rank(mn.rank);
  // Pin before the transport exists: its I/O thread inherits this mask.
  const auto cpus = node_cpus(mn.rank, spec.cores);
  pin_to(cpus);
  omp_set_num_threads(spec.cores);
  const net::JobShape shape = sweep_shape(spec);
  net::TransportConfig cfg;
  cfg.rank = mn.rank;
  cfg.world = spec.nodes;
  cfg.ring_id = mn.ring_id;
  cfg.shape = shape;
  cfg.secret = net::load_secret();
  cfg.listen_host = mn.listen_host;
  cfg.listen_port = mn.listen_port;
  cfg.connect_timeout = std::chrono::milliseconds(30000);
  cfg.io_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(spec.timeout_seconds * 1000));
  auto t = net::make_tcp_transport(cfg);
  std::string peers = mn.peers;
  if (peers == "-") {
    std::printf("PORT %u\n", static_cast<unsigned>(t->listen_port()));
    std::fflush(stdout);
    std::string line;
    if (!std::getline(std::cin, line) || line.rfind("PEERS ", 0) != 0)
      throw Error("bench overlap: rank " + std::to_string(mn.rank) + " expected 'PEERS host:port,...' on stdin");
    peers = line.substr(6);
  }
  t->connect(parse_peers(peers, spec.nodes));
  if (spec.io_priority > 0) {
    // The transport's I/O thread keeps the process's priority; this thread (and the
    // kernel threads it starts from now on) steps down, so that a waking I/O thread
    // preempts a running fold at once instead of after a scheduler slice.
    const int tid = static_cast<int>(::gettid());
    const int now = ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(19, now + spec.io_priority));
  }
  std::printf("INFO rank=%d cpus=%s\n", mn.rank, cpu_list(cpus).c_str());
  std::fflush(stdout);
  for (const auto& mask : spec.masks) {
    BlockAttention attn(attention_config(spec, mask));
    for (auto b : spec.blocks) {
      if (mn.rank == 0) logger("bench")->info("mask {} b {}", mask, b);
      const StepRow row = BlockSweep(*t, shape, spec, attn, mask, b).run();
      std::printf("%s\n", to_line(row).c_str());
      std::fflush(stdout);
    }
  }
  BlockSweep::agree(*t, shape, 0);  // nobody closes while a neighbour still sends
  t->close();
}

double measure_flops(const SweepSpec& spec, std::int64_t b) {
  // Every node's kernel runs at once, each on its own CPUs, as in the sweep (CPUs that
  // share a core or a cache slow each other down); node 0's median is the answer.
  std::vector<double> node0;
  std::vector<std::thread> nodes;
  std::exception_ptr error;
  std::mutex mu;
  for (int r = 0; r < spec.nodes; ++r)
    nodes.emplace_back([&, r] {
      try {
        pin_to(node_cpus(r, spec.cores));
        omp_set_num_threads(spec.cores);
        BlockAttention attn(attention_config(spec, "none"));
        const std::size_t esz = dtype_size(spec.dtype);
        std::vector<std::byte> q(static_cast<std::size_t>(b * spec.heads * spec.head_dim) * esz),
            kv(2 * static_cast<std::size_t>(b * spec.kv_heads * spec.head_dim) * esz);
        fill_random(q, spec.dtype, 1);
        fill_random(kv, spec.dtype, 2);
        OnlineSoftmaxState st(b, spec.heads, spec.head_dim);
        const auto pos = Positions::contiguous(0, b);
        std::vector<double> f;
        const auto start = Clock::now();
        for (int i = 0; i < 2 + 5 || since(start) < 1.0; ++i) {  // two warm-ups, then >= 1 s
          const auto t0 = Clock::now();
          const double flops = attn.fold(q.data(), pos, kv.data(), kv.data() + kv.size() / 2, pos, st).useful_flops;
          if (i >= 2) f.push_back(flops / since(t0));
          if (i % 64 == 63) st.reset();
        }
        if (r == 0) node0 = f;
      } catch (...) {
        std::lock_guard lock(mu);
        error = std::current_exception();
      }
    });
  for (auto& t : nodes) t.join();
  if (error) std::rethrow_exception(error);
  return median(node0);
}

}  // namespace ringattn::bench::overlap
