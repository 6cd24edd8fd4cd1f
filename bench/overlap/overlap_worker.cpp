#include "overlap_worker.hpp"

#include <omp.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <thread>
#include <utility>

#include "overlap_model.hpp"
#include "ringattn/split.hpp"
#include "../../src/node/launcher_channel.hpp"
#include "../../src/node/report.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/block_backward.hpp"
#include "ringattn/error.hpp"
#include "ringattn/step_probe.hpp"
#include "../../src/cli/log.hpp"
#include "ringattn/layout.hpp"

namespace ringattn::bench::overlap {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The all-reduce tokens: empty messages on the ring's message channel, the value in their
// job number.
constexpr std::uint32_t kTokenType = 0xA11ED;

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

// What a forward leaves for the backward of rows q at `pos` against one K/V block: lse
// from a fold of the block (into st, reset first), and D = rowsum(dO ∘ O) with dO the
// random d_o in the kernel's dtype.
void backward_inputs(const SweepSpec& spec, BlockAttention& attn, const void* q, const Positions& pos, const void* k,
                     const void* v, const Positions& kpos, const std::vector<std::byte>& d_o, OnlineSoftmaxState& st,
                     std::vector<float>& lse, std::vector<float>& delta) {
  const std::int64_t rows = pos.size();
  st.reset();
  attn.fold(q, pos, k, v, kpos, st);
  std::vector<float> o(static_cast<std::size_t>(rows * spec.heads * spec.head_dim)), d_o32(o.size());
  lse.resize(static_cast<std::size_t>(rows * spec.heads));
  finalize(st, o.data(), lse.data());
  if (spec.dtype == DType::bf16)
    from_bf16(reinterpret_cast<const std::uint16_t*>(d_o.data()), d_o32.data(), static_cast<std::int64_t>(o.size()));
  else
    std::memcpy(d_o32.data(), d_o.data(), o.size() * sizeof(float));
  delta.resize(lse.size());
  attention_backward_delta(o.data(), d_o32.data(), rows, spec.heads, spec.head_dim, delta.data(), spec.cores);
}

// Rounds per block size: enough for min_seconds of the slower kind, at least five so a
// median has two samples on each side of it.
int reps_for(double estimate, const SweepSpec& spec) {
  const double n = std::ceil(spec.min_seconds / std::max(estimate, 1e-6));
  return static_cast<int>(std::clamp(n, 5.0, static_cast<double>(std::max(5, spec.max_reps))));
}

// One member's measurements for one mask and block size, on the ring's own step.
class BlockSweep {
 public:
  // bwd and grad_attn (fp32, the accumulators' spec) only for a backward sweep.
  BlockSweep(Ring& ring, const SweepSpec& spec, BlockAttention& attn, BlockAttentionBackward* bwd,
             const BlockAttention* grad_attn, const std::string& mask, std::int64_t b, std::uint64_t call)
      : ring_(ring), spec_(spec), attn_(attn), bwd_(bwd), rank_(ring.rank()), world_(ring.world_size()), b_(b) {
    const Layout layout = mask == "causal" ? Layout::zigzag : Layout::contiguous;
    const Positions own = shard_positions(layout, b * world_, world_, rank_);
    own_pos_ = own;
    const std::size_t esz = dtype_size(spec.dtype);
    const std::size_t kv = static_cast<std::size_t>(own.size() * spec.kv_heads * spec.head_dim) * esz;
    q_.resize(static_cast<std::size_t>(own.size() * spec.heads * spec.head_dim) * esz);
    std::vector<std::byte> k(kv), v(kv);
    fill_random(q_, spec.dtype, 1000 + static_cast<std::uint64_t>(rank_));
    fill_random(k, spec.dtype, 2000 + static_cast<std::uint64_t>(rank_));
    fill_random(v, spec.dtype, 3000 + static_cast<std::uint64_t>(rank_));
    step_ = std::make_unique<RingStepProbe>(ring, attn, call, own, k.data(), v.data());
    state_ = OnlineSoftmaxState(own.size(), spec.heads, spec.head_dim);
    row_.mask = mask;
    row_.rank = rank_;
    row_.b = b;
    row_.block_bytes = static_cast<double>(step_->block_bytes());
    if (bwd_) set_up_backward(*grad_attn, call, own, k.data(), v.data());
  }

  // Rounds of the four step kinds, interleaved, so that a slow drift of the machine
  // (other load, a busy sibling CPU) touches every kind alike; medians over the rounds.
  StepRow run() {
    agree(ring_, 0);
    state_.reset();
    Round warm = round();  // creates the kernel's primitives, sizes TCP's window
    // Cheap sizes get one more for a clean estimate; all members must agree on it.
    if (agree(ring_, warm.compute < 0.05 ? 1 : 0)) warm = round();
    const int n = static_cast<int>(agree(ring_, static_cast<std::uint64_t>(reps_for(std::max(warm.compute, warm.transfer), spec_))));
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
    row_.t_compute = cli::median(tc);
    row_.t_transfer = cli::median(tx);
    row_.t_serial = cli::median(ts);
    row_.t_overlap = cli::median(to);
    row_.t_fold_in_overlap = cli::median(tf);
    row_.useful_flops = flops / n;
    row_.cpu_share = fold_cpu / (fold_wall * spec_.cores);
    row_.io_cpu_per_byte = io_x / (n * row_.block_bytes);
    row_.io_cpu_per_byte_overlap = io_o / (n * row_.block_bytes);
    row_.reps_compute = row_.reps_transfer = row_.reps_serial = row_.reps_overlap = n;
    return row_;
  }

  // Ring all-reduce (max) of a small number; also the barrier between phases. P−1
  // rounds of "send what I know to the successor, take the max with the predecessor's".
  static std::uint64_t agree(Ring& ring, std::uint64_t v) {
    const int P = ring.world_size(), me = ring.rank();
    for (int round = 0; round + 1 < P; ++round) {
      auto s = ring.send_message((me + 1) % P, kTokenType, v, {});
      auto r = ring.receive_message((me + P - 1) % P, kTokenType, [](const MessageHeader&) { return std::span<std::byte>(); });
      ring.wait(s);
      v = std::max(v, ring.wait(r).job);
    }
    return v;
  }

 private:
  struct Round {
    double compute = 0, transfer = 0, serial = 0, overlap = 0, fold_in_overlap = 0;
    double flops = 0, compute_cpu = 0, io_cpu_transfer = 0, io_cpu_overlap = 0;
  };

  // The backward's inputs: dO, and lse and D from a fold of this rank's own block (what
  // the forward would leave), fp32 dQ and block accumulators, and the gradient stream's
  // probe: a second block per pass, fp32 [rows, kv_heads, head_dim] x 2, as
  // Ring::backward sends them (the distinct call number keeps its frames apart).
  void set_up_backward(const BlockAttention& grad_attn, std::uint64_t call, const Positions& own, const void* k,
                       const void* v) {
    const std::int64_t rows = own.size(), hd = spec_.heads * spec_.head_dim, kd = spec_.kv_heads * spec_.head_dim;
    d_o_.resize(q_.size());
    fill_random(d_o_, spec_.dtype, 4000 + static_cast<std::uint64_t>(rank_));
    backward_inputs(spec_, attn_, q_.data(), own_pos_, k, v, own, d_o_, state_, lse_, delta_);
    dq_.assign(static_cast<std::size_t>(rows * hd), 0.0f);
    acc_k_.assign(static_cast<std::size_t>(rows * kd), 0.0f);
    acc_v_.assign(acc_k_.size(), 0.0f);
    grads_ = std::make_unique<RingStepProbe>(ring_, grad_attn, call + (1u << 20), own, acc_k_.data(), acc_v_.data());
    row_.block_bytes += static_cast<double>(grads_->block_bytes());
  }

  double fold(double* flops = nullptr) {
    const auto t0 = Clock::now();
    const auto blk = step_->current();
    if (bwd_) {
      const GradientStats gs = bwd_->accumulate(q_.data(), own_pos_, {}, blk.k, blk.v, *blk.positions, {},
                                                d_o_.data(), lse_.data(), delta_.data(), dq_.data(), acc_k_.data(),
                                                acc_v_.data());
      if (flops) *flops = gs.useful_flops;
      return since(t0);
    }
    const FoldStats fs = attn_.fold(q_.data(), own_pos_, blk.k, blk.v, *blk.positions, state_);
    if (flops) *flops = fs.useful_flops;
    return since(t0);
  }

  // One exchange of the ring's step: send A, receive B, check it, A <-> B (and, in a
  // backward sweep, the same for the gradient block behind it).
  void post_exchange() {
    step_->post();
    if (grads_) grads_->post();
  }
  void finish_exchange() {
    step_->finish();
    if (grads_) grads_->finish();
  }

  double io_cpu() const { return ring_.traffic().io_cpu_seconds; }

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
    post_exchange();  // the double-buffered step of Ring::forward
    r.fold_in_overlap = fold();
    finish_exchange();
    r.overlap = since(t0);
    r.io_cpu_overlap = io_cpu() - io0;
    return r;
  }

  Ring& ring_;
  const SweepSpec& spec_;
  BlockAttention& attn_;
  BlockAttentionBackward* bwd_;
  int rank_, world_;
  std::int64_t b_;
  std::unique_ptr<RingStepProbe> step_, grads_;
  std::vector<std::byte> d_o_;
  std::vector<float> lse_, delta_, dq_, acc_k_, acc_v_;
  Positions own_pos_;
  std::vector<std::byte> q_;
  OnlineSoftmaxState state_;
  StepRow row_;
};

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

RingOptions member_options(const SweepSpec& spec, int rank) {
  RingOptions o;
  o.rank = rank;
  o.world_size = spec.nodes;
  o.limits.max_rows = *std::max_element(spec.blocks.begin(), spec.blocks.end());
  o.limits.max_heads = spec.heads;
  o.limits.max_kv_heads = spec.kv_heads;
  o.limits.max_head_dim = spec.head_dim;
  // Every member must run the same sweep: its sizes, masks and shape go into the digest.
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  for (auto b : spec.blocks) mix(static_cast<std::uint64_t>(b));
  for (const auto& m : spec.masks) mix(m == "causal" ? 2 : 1);
  mix(static_cast<std::uint64_t>(spec.dtype));
  mix(spec.backward ? 1 : 0);
  o.job_digest = h;
  o.threads = spec.cores;
  o.connect_timeout = 30;
  o.timeout = spec.timeout_seconds;
  return o;
}

void run_member(const SweepSpec& spec, const MemberNet& mn) {
  set_log_rank(mn.rank);
  // Pin before the transport exists: its I/O thread inherits this mask.
  const auto cpus = node_cpus(mn.rank, spec.cores);
  pin_to(cpus);
  omp_set_num_threads(spec.cores);
  node::LauncherChannel launcher(mn.rank);  // the token, and the launcher's end
  RingOptions o = member_options(spec, mn.rank);
  o.ring_id = mn.ring_id;
  o.token = checked_token(launcher.token(o.connect_timeout), "the launcher's pipe");
  node::emit_line(node::ident_line({o.fingerprint(), token_fingerprint(o.token)}));
  if (mn.peers == "-") {  // the launcher's rendezvous
    o.master = mn.listen;
    o.master_is_external = true;
  } else {
    o.peers = split_commas(mn.peers);
    o.listen = mn.listen;
  }
  Ring ring = Ring::connect(o);
  if (spec.io_priority > 0) {
    // The transport's I/O thread keeps the process's priority; this thread (and the
    // kernel threads it starts from now on) steps down, so that a waking I/O thread
    // preempts a running fold at once instead of after a scheduler slice.
    const int tid = static_cast<int>(::gettid());
    const int now = ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(19, now + spec.io_priority));
  }
  node::emit_line("INFO rank=" + std::to_string(mn.rank) + " cpus=" + cpu_list(cpus));
  std::uint64_t call = 0;
  for (const auto& mask : spec.masks) {
    BlockAttention attn(attention_config(spec, mask));
    AttentionConfig grad_cfg = attention_config(spec, mask);
    grad_cfg.dtype = DType::f32;  // the accumulators travel in fp32
    std::optional<BlockAttentionBackward> bwd;
    std::optional<BlockAttention> grad_attn;
    if (spec.backward) {
      bwd.emplace(attention_config(spec, mask));
      grad_attn.emplace(grad_cfg);
    }
    for (auto b : spec.blocks) {
      if (mn.rank == 0) cli::logger("bench")->info("mask {} b {}{}", mask, b, spec.backward ? " (backward)" : "");
      const StepRow row = BlockSweep(ring, spec, attn, bwd ? &*bwd : nullptr, grad_attn ? &*grad_attn : nullptr, mask,
                                     b, ++call)
                              .run();
      node::emit_line(to_line(row));
    }
  }
  BlockSweep::agree(ring, 0);  // nobody closes while a neighbour still sends
  ring.close();
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
        const void* k = kv.data();
        const void* v = kv.data() + kv.size() / 2;
        // A backward sweep's kernel is the block backward: its inputs as the sweep makes
        // them (dO random, lse and D from a fold of the block itself), its accumulators fp32.
        std::optional<BlockAttentionBackward> bwd;
        std::vector<std::byte> d_o;
        std::vector<float> lse, delta, dq, dk, dv;
        if (spec.backward) {
          bwd.emplace(attention_config(spec, "none"));
          d_o.resize(q.size());
          fill_random(d_o, spec.dtype, 3);
          backward_inputs(spec, attn, q.data(), pos, k, v, pos, d_o, st, lse, delta);
          dq.assign(static_cast<std::size_t>(b * spec.heads * spec.head_dim), 0.0f);
          dk.assign(static_cast<std::size_t>(b * spec.kv_heads * spec.head_dim), 0.0f);
          dv.assign(dk.size(), 0.0f);
        }
        std::vector<double> f;
        const auto start = Clock::now();
        for (int i = 0; i < 2 + 5 || since(start) < 1.0; ++i) {  // two warm-ups, then >= 1 s
          const auto t0 = Clock::now();
          const double flops =
              bwd ? bwd->accumulate(q.data(), pos, {}, k, v, pos, {}, d_o.data(), lse.data(), delta.data(), dq.data(),
                                    dk.data(), dv.data())
                        .useful_flops
                  : attn.fold(q.data(), pos, k, v, pos, st).useful_flops;
          if (i >= 2) f.push_back(flops / since(t0));
          if (!bwd && i % 64 == 63) st.reset();
        }
        if (r == 0) node0 = f;
      } catch (...) {
        std::lock_guard lock(mu);
        error = std::current_exception();
      }
    });
  for (auto& t : nodes) t.join();
  if (error) std::rethrow_exception(error);
  return cli::median(node0);
}

}  // namespace ringattn::bench::overlap
