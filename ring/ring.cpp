// ringattn::Ring (include/ringattn/ring.hpp): connect once, then forward() per call.
#include "ring/schedules.hpp"
#include "ringattn/ring.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "core/logger.hpp"
#include "kernels/internals.hpp"
#include "net/tcp/rendezvous.hpp"
#include "net/transport.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ring/block_layout.hpp"
#include "ring/call_checks.hpp"
#include "ring/frame_tags.hpp"
#include "ring/internals.hpp"
#include "ring/ring_impl.hpp"
#include "ring/rotation.hpp"
#include "ring/ring_token.hpp"
#include "ring/ring_step.hpp"
#include "ring/timeouts.hpp"

namespace ringattn {

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void check_limit(const char* what, std::int64_t v, std::int64_t most) {
  if (v < 1 || v > most)
    throw InvalidArgument("ring limits: " + std::string(what) + " = " + std::to_string(v) + " must be in 1.." +
                          std::to_string(most));
}

}  // namespace

// The HELLO's limits: the ring's four, compared by name, and the largest frame they allow
// (a K/V block, a decode query or a partial state of max_rows rows, fp32, with documents),
// which bounds every frame before anything is allocated.
net::LinkLimits RingInternals::link_limits(const RingOptions& o) {
  const auto& l = o.limits;
  check_limit("max_rows", l.max_rows, kMaxRankRows);
  check_limit("max_heads", l.max_heads, 1 << 16);
  check_limit("max_kv_heads", l.max_kv_heads, 1 << 16);
  check_limit("max_head_dim", l.max_head_dim, 1 << 16);
  const auto H = static_cast<std::uint64_t>(l.max_heads), KH = static_cast<std::uint64_t>(l.max_kv_heads),
             D = static_cast<std::uint64_t>(l.max_head_dim), rows = static_cast<std::uint64_t>(l.max_rows);
  auto bad = [&](const std::string& why) {
    throw InvalidArgument("ring limit 'max_head_dim' = " + std::to_string(D) + " " + why);
  };
  constexpr std::uint64_t u32 = 0xFFFFFFFFu;
  if (KH * D > u32) bad("makes max_kv_heads*max_head_dim overflow 32 bits");
  if (H * (D + 2) > u32) bad("makes max_heads*(max_head_dim+2) overflow 32 bits");
  if ((H + 2 * KH) * D > u32) bad("makes (max_heads+2*max_kv_heads)*max_head_dim overflow 32 bits");
  const auto r32 = static_cast<std::uint32_t>(rows);
  const ring::BlockLayout kv = ring::BlockLayout::kv(DType::f32, static_cast<std::uint32_t>(KH * D), r32, true);
  const ring::BlockLayout query = ring::BlockLayout::query(DType::f32, static_cast<std::uint32_t>((H + 2 * KH) * D), r32);
  std::uint64_t state = 0;
  const bool state_fits = !__builtin_mul_overflow(rows, H * (D + 2) * 4, &state);
  if (!kv.fits || !query.fits || !state_fits || std::max({kv.bytes(), query.bytes(), state}) > net::kMaxPayloadBytes)
    throw InvalidArgument("ring limit 'max_block_rows' = " + std::to_string(rows) + " makes a block larger than the " +
                          std::to_string(net::kMaxPayloadBytes >> 30) + " GiB frame ceiling");
  net::LinkLimits n;
  n.max_payload = std::max({kv.bytes(), query.bytes(), state});
  // A mesh's shape is agreed like the limits, by name: ranks started with other groups never
  // connect, and the refusal says which option differs (serve's and generate's --tp set it).
  n.fields = {static_cast<std::uint32_t>(H), static_cast<std::uint32_t>(KH), static_cast<std::uint32_t>(D), r32,
              static_cast<std::uint32_t>(std::max(1, o.group_size))};
  n.names = {"max_heads", "max_kv_heads", "max_head_dim", "max_block_rows", "group_size (the mesh's group: --tp)"};
  n.options_digest = o.job_digest;
  return n;
}

void check_limits(const RingLimits& limits) {
  auto frames = [](const RingLimits& l) {  // throws InvalidArgument naming the bound
    RingOptions o;
    o.limits = l;
    RingInternals::link_limits(o);
  };
  auto fits = [&](std::int64_t rows) {
    RingLimits t = limits;
    t.max_rows = rows;
    try {
      frames(t);
      return true;
    } catch (const InvalidArgument&) {
      return false;
    }
  };
  try {
    frames(limits);
  } catch (const InvalidArgument& e) {
    if (!fits(1)) throw;  // not the rows: a head count or the head dim itself is out of range
    std::int64_t lo = 1, hi = limits.max_rows;  // lo fits, hi does not
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    throw InvalidArgument("ring limits: max_rows = " + std::to_string(limits.max_rows) + " is too large (" + e.what() +
                          "); with max_heads " + std::to_string(limits.max_heads) + ", max_kv_heads " +
                          std::to_string(limits.max_kv_heads) + " and max_head_dim " +
                          std::to_string(limits.max_head_dim) + " the largest max_rows that fits is " +
                          std::to_string(lo));
  }
}

namespace {

// Where this rank listens: `listen` ("host" or "host:port"), else `fallback_host`:0.
net::PeerAddress listen_address(const std::string& listen, const std::string& fallback_host) {
  net::PeerAddress a;
  if (listen.empty()) a = {fallback_host, 0};
  else if (listen.find(':') == std::string::npos || (listen.front() == '[' && listen.back() == ']'))
    a = {listen.front() == '[' ? listen.substr(1, listen.size() - 2) : listen, 0};
  else a = net::parse_peer_address(listen, "RingOptions::listen");
  a.host = net::numeric_host(a.host, listen.empty() ? "the listen address" : "RingOptions::listen");
  return a;
}

}  // namespace


Ring::Ring(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Ring::Ring(Ring&&) noexcept = default;
Ring& Ring::operator=(Ring&&) noexcept = default;
Ring::~Ring() {
  try {
    close();
  } catch (...) {  // never from a destructor
  }
}

Ring Ring::connect(const RingOptions& o) {
  if (o.world_size < 1 || o.world_size > kMaxWorldSize)
    throw InvalidArgument("RingOptions: world_size = " + std::to_string(o.world_size) + " must be in 1.." +
                          std::to_string(kMaxWorldSize));
  if (o.rank < 0 || o.rank >= o.world_size)
    throw InvalidArgument("RingOptions: rank = " + std::to_string(o.rank) + " is outside 0.." + std::to_string(o.world_size - 1));
  const milliseconds io_timeout = ring::timeout_ms(o.timeout, "RingOptions: timeout");
  const milliseconds connect_timeout = ring::timeout_ms(o.connect_timeout, "RingOptions: connect_timeout");
  check_limits(o.limits);
  if (o.threads < 0 || o.threads > kMaxThreads)
    throw InvalidArgument("RingOptions: threads = " + std::to_string(o.threads) + " must be in 0.." +
                          std::to_string(kMaxThreads) + " (0: all cores)");
  auto impl = std::make_unique<Impl>();
  impl->options = o;
  set_log_rank(o.rank);
  net::TransportConfig tc;
  tc.rank = o.rank;
  tc.world = o.world_size;
  tc.ring_id = o.ring_id;
  tc.limits = RingInternals::link_limits(o);
  tc.tls = o.tls;
  if (o.group_size < 1 || o.world_size % o.group_size != 0)
    throw InvalidArgument("RingOptions: group_size = " + std::to_string(o.group_size) + " must divide the world size " +
                          std::to_string(o.world_size));
  tc.all_pairs = o.all_pairs || o.group_size > 1;
  tc.connect_timeout = connect_timeout;
  tc.io_timeout = io_timeout;
  ring::use_frame_tags(tc);
  if (o.world_size == 1) {
    impl->transport = net::make_tcp_transport(tc);
    impl->step = std::make_unique<ring::RingStep>(*impl->transport, static_cast<std::uint32_t>(o.limits.max_rows));
    return Ring(std::move(impl));
  }
  tc.secret = ring::token_of(o);
  const auto deadline = Clock::now() + tc.connect_timeout;
  std::vector<net::PeerAddress> peers;
  std::unique_ptr<net::tcp::RendezvousServer> server;
  if (!o.peers.empty()) {
    if (static_cast<int>(o.peers.size()) != o.world_size)
      throw InvalidArgument("RingOptions: " + std::to_string(o.peers.size()) + " peers for world size " +
                            std::to_string(o.world_size));
    for (std::size_t r = 0; r < o.peers.size(); ++r)
      peers.push_back(net::parse_peer_address(o.peers[r], "RingOptions::peers[" + std::to_string(r) + "]"));
    const auto own = peers[static_cast<std::size_t>(o.rank)];
    const auto listen = listen_address(o.listen.empty() ? own.text() : o.listen, own.host);
    tc.listen_host = listen.host;
    tc.listen_port = listen.port != 0 ? listen.port : own.port;
    impl->transport = net::make_tcp_transport(tc);
  } else if (!o.master.empty()) {
    const auto master = net::parse_peer_address(o.master, "RingOptions::master");
    net::tcp::RendezvousConfig rc = ring::rendezvous_config(o, tc.secret, tc.connect_timeout);
    // Rank 0 serves the rendezvous on the master address unless a launcher does.
    if (o.rank == 0 && !o.master_is_external) server = std::make_unique<net::tcp::RendezvousServer>(
        net::PeerAddress{net::numeric_host(master.host, "RingOptions::master"), master.port}, rc);
    // Listen where the others can reach us: the interface this rank reaches the master by.
    const auto listen = listen_address(o.listen, net::tcp::local_address_towards(master));
    tc.listen_host = listen.host;
    tc.listen_port = listen.port;
    impl->transport = net::make_tcp_transport(tc);
    const net::PeerAddress self{listen.host, impl->transport->listen_port()};
    rc.timeout = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    peers = net::tcp::rendezvous(master, o.rank, self, rc);
  } else {
    throw InvalidArgument("RingOptions: no peers and no master: set peers (every rank's host:port) or master "
                          "(host:port of the rendezvous), e.g. RINGATTN_PEERS or RINGATTN_MASTER");
  }
  impl->transport->connect(peers);
  if (server) {
    const std::string why = server->wait();
    if (!why.empty()) throw NetworkError("rank 0: " + why, FailureCause::peer_silent);
  }
  impl->step = std::make_unique<ring::RingStep>(*impl->transport, static_cast<std::uint32_t>(o.limits.max_rows));
  logger("ring")->info("ring of {} connected{}", o.world_size, o.tls ? " (TLS)" : "");
  return Ring(std::move(impl));
}

void RingInternals::set_step_hook(Ring& ring, StepHook hook) { ring.impl_->hook = std::move(hook); }

net::Transport& RingInternals::transport(Ring& ring) { return *ring.impl_->transport; }

std::uint64_t RingInternals::max_frame_bytes(const Ring& ring) {
  return link_limits(ring.impl_->options).max_payload;
}

std::uint32_t RingInternals::max_block_rows(const Ring& ring) {
  return static_cast<std::uint32_t>(ring.impl_->options.limits.max_rows);
}

void RingInternals::check_limits(const Ring& ring, const AttentionSpec& spec, std::int64_t rows, const std::string& who) {
  ring.impl_->check_limits(spec, rows, "rows", [&](const std::string& what) { throw InvalidArgument(who + what); });
}

int Ring::rank() const { return impl_->options.rank; }
int Ring::world_size() const { return impl_->options.world_size; }
const RingLimits& Ring::limits() const { return impl_->options.limits; }

bool Ring::broken() const {
  std::lock_guard lock(impl_->mu);
  return !impl_->broken.empty();
}

std::string Ring::broken_reason() const {
  std::lock_guard lock(impl_->mu);
  return impl_->broken;
}

void Ring::close() {
  if (impl_ && impl_->transport) impl_->transport->close();
}

namespace {

// The K/V rotation (rotation.hpp): this rank's block first, then each other rank's as it
// comes around, folded into im.state while the next one travels.
// On `step`: the ring's own (with its observer and fault hook), or a mesh scope's.
void rotate_and_fold(Ring::Impl& im, ring::RingStep& step, const AttentionSpec& spec, const ring::CheckedCall& fc,
                     const ring::CallSpec& cs, const void* qp, std::span<const std::int64_t> positions, const float* k,
                     const float* v, ForwardStats& st) {
  const bool own = &step == im.step.get();
  const RingInternals::StepHook no_hook;
  const std::function<void(int)> no_observer;
  // fp32 K and V go out from the caller's arrays (no copy), unless a fault hook wants to
  // change the block's bytes.
  step.begin(cs, ++im.calls, fc.qpos, k, v, /*borrow=*/!(own && im.hook), fc.docs);
  const ring::BusyKernel busy(*im.transport, fc.kernel);
  const ring::RotationStats rs = ring::rotate(step, own ? im.observer : no_observer, own ? im.hook : no_hook,
                                              [&](int, const ring::RingStep::View& blk) {
    if (ring::step_hidden(spec.mask, positions, fc.docs, blk)) {
      ++st.steps_skipped;
      return;
    }
    const auto t0 = Clock::now();
    // Documents checked once: this rank's in check_forward, each visiting block's in
    // RingStep::finish; the kernel does not walk them again.
    const FoldStats fs =
        KernelInternals::fold_checked(fc.kernel, qp, fc.qpos, fc.docs, blk.k, blk.v, *blk.positions, blk.documents, im.state);
    st.compute_seconds += since(t0);
    st.useful_flops += fs.useful_flops;
    if (fs.tiles_computed == 0) ++st.steps_skipped;
  });
  st.steps += rs.steps;
  st.wait_seconds += rs.wait_seconds;
}

// Every forward() by the ring schedule, in any scope: `documents` unset for a call without them.
ForwardStats forward_call(Ring::Impl& im, Scope scope, const AttentionSpec& spec, std::span<const float> q,
                          std::span<const float> k, std::span<const float> v, std::span<const std::int64_t> positions,
                          std::optional<std::span<const std::int32_t>> documents, std::span<float> o,
                          std::span<float> lse) {
  const auto start = Clock::now();
  im.check_usable();
  ring::check_scope(im, scope, "forward");
  const ring::CheckedCall fc = ring::check_call(im, "forward", spec, q, k, v, positions, documents, o, lse);
  const ring::CallSpec cs = ring::call_spec(spec, fc.kernel.config().scale, documents.has_value());
  const void* qp = q.data();
  if (spec.dtype == DType::bf16) {
    im.q_bf16.resize(q.size());
    to_bf16(q.data(), im.q_bf16.data(), static_cast<std::int64_t>(q.size()));
    qp = im.q_bf16.data();
  }
  im.state.reset(static_cast<std::int64_t>(positions.size()), spec.heads, spec.head_dim);
  ring::RingStep& step =
      scope == Scope::ring ? *im.step : im.mesh_of().step(scope, static_cast<std::uint32_t>(im.options.limits.max_rows));
  ForwardStats st;
  try {
    rotate_and_fold(im, step, spec, fc, cs, qp, positions, k.data(), v.data(), st);
  } catch (...) {
    ring::fail_call(im);
  }
  finalize(im.state, o.data(), lse.empty() ? nullptr : lse.data());
  st.bytes_sent = step.payload_bytes_sent();
  st.seconds = since(start);
  return st;
}

}  // namespace

namespace ring {

ForwardStats forward_ring(Ring::Impl& im, const AttentionCall& c, std::span<float> o, std::span<float> lse) {
  return forward_call(im, c.scope, c.spec, c.q, c.k, c.v, c.positions, documents_of(c), o, lse);
}

}  // namespace ring

namespace {

// ulysses and hybrid span the whole ring.
void check_whole_ring(const AttentionCall& c, const char* call) {
  if (c.scope != Scope::ring)
    throw InvalidArgument(std::string(call) + ": the " + to_string(c.schedule) +
                          " schedule spans the whole ring (scope ring); the group and across scopes run the ring "
                          "schedule only");
}

}  // namespace

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::ring: return "ring";
    case Schedule::ulysses: return "ulysses";
    case Schedule::hybrid: return "hybrid";
  }
  return "?";
}

ForwardStats Ring::forward(const AttentionCall& c, std::span<float> o, std::span<float> lse) {
  switch (c.schedule) {
    case Schedule::ring: return ring::forward_ring(*impl_, c, o, lse);
    case Schedule::ulysses: check_whole_ring(c, "forward"); return ring::forward_ulysses(*this, *impl_, c, o, lse);
    case Schedule::hybrid: check_whole_ring(c, "forward"); return ring::forward_hybrid(*this, *impl_, c, o, lse);
  }
  throw InvalidArgument("forward: schedule " + std::to_string(static_cast<int>(c.schedule)) + " is not one of ring, ulysses, hybrid");
}

BackwardStats Ring::backward(const AttentionCall& c, const Gradients& g) {
  switch (c.schedule) {
    case Schedule::ring: return ring::backward_ring(*impl_, c, g);
    case Schedule::ulysses: check_whole_ring(c, "backward"); return ring::backward_ulysses(*this, *impl_, c, g);
    case Schedule::hybrid: check_whole_ring(c, "backward"); return ring::backward_hybrid(*this, *impl_, c, g);
  }
  throw InvalidArgument("backward: schedule " + std::to_string(static_cast<int>(c.schedule)) + " is not one of ring, ulysses, hybrid");
}

DecodeStats Ring::decode(const AttentionCall& c, KVCache& cache, std::span<float> o, std::span<float> lse) {
  if (c.schedule != Schedule::ring)
    throw InvalidArgument(std::string("decode: the ") + to_string(c.schedule) +
                          " schedule is not one decode runs by (the cache is stationary: schedule ring)");
  return ring::decode_ring(*this, *impl_, c, cache, o, lse);
}

}  // namespace ringattn
