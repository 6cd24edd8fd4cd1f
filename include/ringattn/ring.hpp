// ringattn — the ring as a communicator: connect once, then one call per layer and batch.
//
//   auto ring = ringattn::Ring::connect(ringattn::RingOptions::from_env());
//   for (each layer of each batch)                       // on this rank's rows only
//     ring.forward({spec, q, k, v, positions}, o, lse);
//   ... its gradients:  ring.backward({spec, q, k, v, positions}, {o, lse, d_o, dq, dk, dv});
//   ... and for generation, per layer and token batch (kv_cache.hpp):
//     ring.decode({spec, q, k, v, positions, sequences}, cache, o, lse);
//
// One description of a call (AttentionCall below) says everything the three entry points
// vary in: the rows, a packed batch's documents or none, the schedule (the ring, Ulysses'
// all-to-all, or the hybrid of both) and the ranks it spans (the ring, a mesh's group, or
// across the groups).
//
// Exact attention for this rank's queries over every rank's keys: the K/V blocks of all
// ranks travel once around the ring (double-buffered: the next block arrives while the
// kernel folds this one), each visiting block carrying the global positions of its rows,
// and folds into an online-softmax state. Any sharding works as long as every rank
// passes strictly increasing global positions (layout.hpp has the usual ones); the
// causal mask and sliding windows are evaluated on them.
//
// Every rank must make the same calls in the same order, each with the same spec (its
// own number of rows). A call's spec travels with its blocks, and a rank that calls with
// another spec fails the call on every rank with an error naming both. Rows per call
// and heads are bounded by the limits agreed when the ring connected, before anything
// is allocated. Buffers are pooled: repeated calls of one shape allocate nothing.
//
// Errors: InvalidArgument for a bad call, found before anything was sent (the ring stays
// usable; the other ranks, if they made the call, will time out waiting). NetworkError
// for everything else — a peer that died, stalled or fell silent for `timeout`, a
// disagreement, a corrupt frame: the ring is broken from then on (broken() is true and
// every later call throws); connect a new one. Nothing blocks past its deadline.
//
// Thread safety: one call at a time per Ring. The kernel uses `threads` OpenMP threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "ringattn/kv_cache.hpp"
#include "ringattn/messages.hpp"
#include "ringattn/types.hpp"

namespace ringattn {

// What every rank agrees on when the ring connects: the largest call it will make.
struct RingLimits {
  // Most rows any rank passes to one call. With the other three at their defaults a
  // block of K and V is then 8 GiB; 1 << 16 would exceed the 16 GiB frame ceiling.
  std::int64_t max_rows = 1 << 15;
  std::int64_t max_heads = 128;
  std::int64_t max_kv_heads = 128;
  std::int64_t max_head_dim = 256;
};

// Throws InvalidArgument if a ring cannot be made with these limits: each within its
// range, and the largest frame they allow (a block of max_rows rows of K and V in fp32,
// or of the states or queries) under the wire's 16 GiB ceiling; for a max_rows too
// large the message names the largest that fits with these heads and head_dim.
// Ring::connect checks the same, first.
void check_limits(const RingLimits& limits);

struct RingOptions {
  int rank = -1;
  int world_size = 0;
  // How the ranks find each other: every rank's "host:port" (peers[rank] is where this
  // rank listens), or the address of a rendezvous ("host:port"): rank 0 serves it there,
  // collects every rank's address and hands out the list, authenticated with the token.
  std::vector<std::string> peers;
  std::string master;
  bool master_is_external = false;  // the rendezvous is served by a launcher, not rank 0
  // Where this rank listens with a rendezvous: "host" or "host:port". Default: the
  // address of the interface this rank reaches the rendezvous through, any free port.
  std::string listen;
  // The shared secret (at least 16 bytes), or a file holding it (mode 0600).
  std::string token;
  std::string token_file;
  std::uint64_t ring_id = 0;     // rings with another id are refused
  std::uint64_t job_digest = 0;  // anything else the ranks must agree on (a launcher's job)
  bool tls = false;              // TLS 1.3 on every connection, keyed by the token
  // Links between every pair of ranks opened by connect(), not only the ring's (every rank
  // must agree): for the collectives that talk to every rank (all-to-all), so that none
  // opens a connection mid-call. Otherwise other pairs connect on first use.
  bool all_pairs = false;
  // The mesh of forward_hybrid(): groups of this many consecutive ranks (it must divide the
  // world size); 1 (no groups) by default. Above 1, connect() opens every pair's link, as
  // with all_pairs, so that neither the groups nor the rings across them connect mid-call.
  int group_size = 1;
  int threads = 0;               // kernel threads per call (0: all cores)
  std::optional<Isa> isa;        // force a kernel path (default: the best, or RINGATTN_ISA)
  double connect_timeout = 60;   // seconds for the whole connect, rendezvous included
  double timeout = 30;           // seconds a peer may stay silent or stall during a call
  RingLimits limits;

  // From the environment, so that the usual launchers work unchanged:
  //   rank        RINGATTN_RANK, else SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, RANK
  //   world size  RINGATTN_WORLD_SIZE, else SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE, WORLD_SIZE
  //   peers       RINGATTN_PEERS=h:p,h:p,...   or the rendezvous (neither at world size 1)
  //               RINGATTN_MASTER=host:port, else MASTER_ADDR and MASTER_PORT
  //   token       RINGATTN_TOKEN, else RINGATTN_TOKEN_FILE
  //   also        RINGATTN_LISTEN, RINGATTN_RING_ID, RINGATTN_TLS (0/1), RINGATTN_THREADS,
  //               RINGATTN_ISA, RINGATTN_TIMEOUT, RINGATTN_CONNECT_TIMEOUT (seconds),
  //               RINGATTN_MAX_ROWS, RINGATTN_MAX_HEADS, RINGATTN_MAX_KV_HEADS,
  //               RINGATTN_MAX_HEAD_DIM, RINGATTN_ALL_PAIRS (0/1), RINGATTN_GROUP_SIZE
  // Throws InvalidArgument naming the variable that is missing or malformed.
  static RingOptions from_env();

  // 16 hex digits naming everything the ranks of one ring must agree on when they
  // connect (the limits and options_digest): a launcher compares its ranks' fingerprints
  // to name the one started with another job. Throws InvalidArgument for bad limits.
  std::string fingerprint() const;
};

// The ranks a collective runs over: the whole ring, this rank's group of the mesh
// (RingOptions::group_size consecutive ranks), or the ranks across the groups (those at
// this rank's place in every group). Without a mesh (group_size 1) a group is this rank
// alone and across is the whole ring.
enum class Scope { ring, group, across };

struct CollectiveStats {
  double seconds = 0;          // the whole call
  double wait_seconds = 0;     // blocked on the network
  std::uint64_t bytes_sent = 0;
};

struct ForwardStats {
  double seconds = 0;          // the whole call
  double compute_seconds = 0;  // in the kernel
  double wait_seconds = 0;     // blocked on the network after the kernel (exposed transfer)
  double useful_flops = 0;     // 4 * visible (query, key) pairs * head_dim * heads
  int steps = 0;               // blocks folded (= world size)
  int steps_skipped = 0;       // blocks the mask or the documents hid completely (relayed, not folded)
  std::uint64_t bytes_sent = 0;
};

struct BackwardStats {
  double seconds = 0;          // the whole call
  double compute_seconds = 0;  // in the backward kernel
  double wait_seconds = 0;     // blocked on the network after the kernel (exposed transfer)
  double useful_flops = 0;     // 10 * visible (query, key) pairs * head_dim * heads (2.5x forward's)
  int steps = 0;               // blocks visited (= world size)
  int steps_skipped = 0;       // blocks the mask or the documents hid completely (relayed only)
  std::uint64_t bytes_sent = 0;  // K/V blocks (as forward's) plus the gradient accumulators (fp32)
};

struct DecodeStats {
  double seconds = 0;          // the whole call
  double compute_seconds = 0;  // partial states over this rank's cache
  double wait_seconds = 0;     // blocked on the network (gather and reduce)
  std::int64_t tokens = 0;     // queries of the step over all ranks
  std::int64_t cache_rows = 0; // cache rows this rank read for them (its share of the context)
  double useful_flops = 0;     // 4 * visible (query, cached key) pairs on this rank * head_dim * heads
  std::uint64_t bytes_sent = 0;  // this rank's payload bytes for the call
};

// How a call moves the rows (Ring::forward): the same attention every way.
enum class Schedule : std::uint8_t {
  ring,     // K/V blocks around the ranks of the call's scope
  ulysses,  // an all-to-all to a head split and back (RingOptions::all_pairs)
  hybrid,   // Ulysses inside each group, the ring across the groups (RingOptions::group_size)
};
const char* to_string(Schedule s);  // "ring", "ulysses", "hybrid"

// One call of this rank: its rows, and how the call runs them (Ring::forward, backward,
// decode). Built in place: ring.forward({spec, q, k, v, positions}, o, lse).
struct AttentionCall {
  AttentionSpec spec;
  std::span<const float> q, k, v;           // [rows, heads, head_dim], [rows, kv_heads, head_dim]
  std::span<const std::int64_t> positions;  // [rows]: global, strictly increasing (decode: any order)
  // [rows]: a packed batch's document ids (forward, backward), each token's sequence
  // (decode); empty: one sequence (forward, backward only).
  std::span<const std::int32_t> documents = {};
  Schedule schedule = Schedule::ring;
  Scope scope = Scope::ring;  // the ranks of the call: all, this rank's group, or across the groups
};

// backward()'s inputs beside the call (forward's o and lse, and dLoss/dO) and its outputs.
struct Gradients {
  std::span<const float> o, lse, d_o;  // [rows, heads, head_dim], [rows, heads], as o
  std::span<float> dq, dk, dv;         // [rows, heads, head_dim], [rows, kv_heads, head_dim] x2
};

class Ring {
 public:
  // Forms the ring (rendezvous, authenticated connections to both neighbours). Throws
  // InvalidArgument for bad options, NetworkError if the ring cannot form in time.
  static Ring connect(const RingOptions& options);

  Ring(Ring&&) noexcept;
  Ring& operator=(Ring&&) noexcept;
  ~Ring();  // closes

  int rank() const;
  int world_size() const;
  const RingLimits& limits() const;

  // Attention for this rank's rows (AttentionCall: q [rows, heads, head_dim], k and v
  // [rows, kv_heads, head_dim], positions [rows], all fp32 row-major, positions strictly
  // increasing and global), into o [rows, heads, head_dim] and lse [rows, heads] or empty.
  // rows = positions.size() may differ between ranks and calls, from 1 (a call with no
  // rows is refused: the wire carries no empty blocks) up to limits().max_rows. Rows that
  // see no key get O = 0 and lse = -inf.
  //
  // documents (a packed batch, packing.hpp): the document id of each row, non-decreasing
  // (documents are contiguous runs of positions: shard_documents() returns positions and
  // ids that fit). A query sees only keys of its own document, with the spec's mask inside
  // it. The ids travel with the K/V blocks; a ring step whose block shares no document with
  // this rank's queries (or that the mask hides) is relayed without being folded. Every
  // rank of the call passes documents or none; a rank that differs fails the call on every
  // rank with an error naming both.
  //
  // schedule ring: the K/V blocks of the scope's ranks travel once around them
  // (double-buffered), folded into an online-softmax state. scope group or across runs it
  // among the ranks of this rank's group of the mesh, or across the groups (tensor
  // parallelism's attention: each rank of a group holds the group's rows for its own
  // heads, and attends over every group's rows of them).
  //
  // schedule ulysses (DeepSpeed-Ulysses): an all-to-all trades the token split for a head
  // split (each rank gets every row of heads/P query heads and of the K/V heads they read;
  // fewer K/V heads than ranks are replicated), the kernel runs on the whole sequence, and
  // the reverse all-to-all brings each rank its rows of every head. The shards may be of
  // any layout (the sequence is ordered by position). Needs heads divisible by the world
  // size, and heads/P and heads/kv_heads dividing one another. Each rank holds the whole
  // sequence for its heads (N (heads + 2 kv_heads) head_dim / P values): a rank's rows stay
  // within limits().max_rows, the sequence need not. Links go to every rank: connect with
  // RingOptions::all_pairs.
  //
  // schedule hybrid (USP's): Ulysses inside each group of RingOptions::group_size
  // consecutive ranks, the ring across the groups. Each rank of a group holds the group's
  // rows for heads / group_size query heads; their K/V go around the ranks that hold the
  // same place in every group, and O and lse come back to the rows' ranks. Conditions as
  // Ulysses' with the group in place of the ring (heads divisible by group_size, a group's
  // rows within limits().max_rows). group_size 1 is the ring's schedule, the world size
  // Ulysses'.
  //
  // ulysses and hybrid span the whole ring (scope ring; another scope is refused). Every
  // rank of the call uses the same schedule and spec; a rank with another spec makes every
  // rank refuse the call (InvalidArgument, the ring stays usable), one calling with another
  // schedule fails the ring naming both.
  ForwardStats forward(const AttentionCall& call, std::span<float> o, std::span<float> lse = {});

  // The gradients of forward() for this rank's rows, by the call's schedule (any schedule:
  // the same attention): given what forward() was given (the call) and returned
  // (Gradients::o, lse — lse is required here), and d_o = dLoss/dO [rows, heads, head_dim],
  // writes dq [rows, heads, head_dim] and dk, dv [rows, kv_heads, head_dim] (fp32,
  // overwritten): exactly dense attention's gradients over the whole sequence.
  //   ring: the K/V blocks go around once more, and each block's dK/dV accumulators (fp32)
  // follow it one hop behind: at every step a rank adds its queries' share to the block it
  // holds (recomputing the scores from lse, nothing [rows x rows] stored), passes the
  // accumulators on while it computes the next block, and after P steps every rank's
  // accumulators come home. Wire bytes per rank: forward's K/V plus 2 * rows * kv_heads *
  // head_dim * 4 per step (fp32 gradients: 2x forward's traffic at fp32, 3x at bf16).
  //   ulysses: q, k, v, dO, lse and D = rowsum(dO o O) go to the head split, the backward
  // kernel runs on the whole sequence, dQ, dK, dV come back (a K/V head that several ranks
  // held sums their shares).
  //   hybrid: Ulysses' head split inside each group, the ring's rotation across the groups,
  // dQ, dK, dV back to the rows' ranks.
  // Inputs must be finite and dq, dk, dv must not share memory with an input or each other
  // (InvalidArgument otherwise, before anything is sent); dk and dv hold accumulators while
  // the call runs, and after a failed call dq, dk, dv are unspecified. Every rank calls
  // backward() alike (spec, documents or not, schedule); a rank calling forward()
  // meanwhile fails the call on every rank with an error naming both.
  BackwardStats backward(const AttentionCall& call, const Gradients& g);

  // Collectives between the ranks of `scope` (tensor parallelism's sums and gathers):
  // every rank of the scope calls them in the same order with the same sizes; a rank that
  // does not fails the ring on every rank of the scope, naming both (as the attention calls).
  //
  // all_reduce: data becomes its element-wise sum over the scope's ranks (a ring
  // reduce-scatter then all-gather: every rank ends with the same bits).
  // all_gather: data is every scope rank's chunk laid end to end (counts[i] floats from
  // scope rank i, this rank's filled in); the others' are filled. Counts may differ.
  // Throws InvalidArgument for sizes that do not fit (nothing sent), NetworkError if the
  // ring failed. scope_rank/scope_size: this rank's place in a scope, and its size.
  CollectiveStats all_reduce(std::span<float> data, Scope scope = Scope::ring);
  CollectiveStats all_gather(std::span<float> data, std::span<const std::size_t> counts, Scope scope = Scope::ring);
  int scope_rank(Scope scope) const;
  int scope_size(Scope scope) const;

  // One decode step on stationary KV shards (kv_cache.hpp), schedule ring, among the ranks
  // of the call's scope (tensor parallelism's decode: each group's ranks hold the same
  // tokens for their own heads, and each rank's cache its shard of those heads' rows).
  // Each rank passes the new tokens it owns (the ones whose hidden state it computed; any
  // number, 0 included, up to limits().max_rows): documents [n] each token's sequence
  // (ids >= 0), positions [n] (each above every cached position of its sequence; tokens
  // of one sequence in one step in any order), q [n, heads, head_dim], k and v [n,
  // kv_heads, head_dim], fp32, finite and within bf16's range for a bf16 call. Then:
  //   1. every rank's queries, with their K/V, travel once around the ring (an
  //      all-gather: P-1 neighbour steps of a few KiB per token);
  //   2. each token's K/V is appended to the `cache` of rank decode_store_rank(sequence,
  //      position) (over the scope's size), so a query sees its own token;
  //   3. every rank computes the partial (m, l, o) of every query over its own cache rows
  //      of that query's sequence (the spec's mask on the positions), streaming its cache
  //      once, in parallel with the other ranks;
  //   4. the partials are merged on their way back to the owning rank (a ring
  //      reduce-scatter: P-1 steps, each moving one rank's (m, l, o) rows).
  // o [n, heads, head_dim] and lse [n, heads] (or empty) then hold exact attention of each
  // query over every cached row of its sequence on every rank. The cache never moves:
  // per token the ring carries its q, k, v and (m, l, o), not the cache.
  // spec.dtype is the cache's dtype and that of q, k, v on the wire; `cache` must have the
  // spec's kv_heads, head_dim and dtype. Every rank makes the same calls with the same spec
  // (the spec travels with the queries and is compared, as in forward()). Errors as in
  // forward(): InvalidArgument before anything is sent, else NetworkError and the ring is
  // broken — also when a token's position does not continue its sequence on the rank that
  // stores it. A call that fails leaves every rank's cache as it was before the call (the
  // step's tokens are taken out again), so the step can be retried on a new ring.
  // The cache is used without a lock: no other thread may touch it during the call.
  DecodeStats decode(const AttentionCall& call, KVCache& cache, std::span<float> o, std::span<float> lse = {});

  // True once a call failed for a network reason; the cause is broken_reason().
  bool broken() const;
  std::string broken_reason() const;
  // The first failure of the ring's links, empty while they are healthy: a peer that died
  // or left between calls shows here before the next call fails.
  std::string link_failure() const;
  // Fails the ring on every rank with `why` (attributed to this rank, with `cause`): every
  // rank's current or next call, wait or receive ends with a NetworkError saying so.
  void abort(const std::string& why, FailureCause cause = FailureCause::local);
  // A drain: this rank asks its peers to let it leave (each hears it within milliseconds,
  // in a keep-alive); the ring works on meanwhile. leaving_ranks() are the ranks that
  // asked, ascending. Who lets them go, and when, is the caller's protocol.
  void announce_leaving();
  std::vector<int> leaving_ranks() const;

  // Messages (ringattn/messages.hpp). send_message posts `payload` to rank `to` (another
  // rank); its bytes must stay alive and unchanged until wait() has returned for it.
  // receive_message posts the receive of the next frame from rank `from`, which must be a
  // MESSAGE of `type`: buffer_for(header) is asked where its payload goes, once the
  // header is in and checked (on the ring's I/O thread: it must not block), and returns a
  // span of exactly header.bytes bytes, or an empty one to refuse a message it cannot take
  // (the ring fails). wait() blocks until the request is done, within the ring's deadline
  // of silence; it returns the header and throws NetworkError (the ring then broken) for a
  // failed link, a refused message or one of another type. ready() does not block.
  MessageRequest send_message(int to, std::uint32_t type, std::uint64_t job, std::span<const std::byte> payload);
  MessageRequest receive_message(int from, std::uint32_t type,
                                 std::function<std::span<std::byte>(const MessageHeader&)> buffer_for);
  MessageHeader wait(MessageRequest& request);
  bool ready(const MessageRequest& request) const;

  // Called on the calling thread at the start of every ring step of every forward() with
  // the step number (0 .. world_size-1), for progress reports. It must not call the ring
  // and should return quickly; an empty function removes it.
  void on_step(std::function<void(int step)> observer);
  // What this rank's links have carried so far.
  RingTraffic traffic() const;
  // A counter that grows while this rank computes (per kernel tile) or its links carry
  // frames: what its keep-alives tell the peers, for a launcher's own liveness report.
  std::uint64_t progress() const;
  // The kernel path a call of `spec` runs on (validates the spec like a call).
  Isa kernel_isa(const AttentionSpec& spec);

  // Fault injection, for testing what a deployment does when a rank fails (the library's
  // own multi-process tests use it through RINGATTN_FAULT): from the next forward() on,
  // at ring step `step` of every call this rank
  //   exit     dies abruptly (_exit(17)), as a killed process would;
  //   hang     stops and never sends again: busy, its progress counter standing still;
  //   slow     takes `slow_seconds` longer over its fold, its progress counter ticking
  //            (a slow but healthy kernel: the ring must wait for it, not time out);
  //   corrupt  flips one payload byte of the block it relays (step >= 1; the frame keeps
  //            the CRC it arrived with, so the successor sees a bad CRC).
  // Throws InvalidArgument for a step outside 0..world_size-1 (corrupt: 1..) or a
  // negative slow_seconds. Never set in production.
  enum class Fault { exit, hang, slow, corrupt };
  void inject_fault(Fault fault, int step, double slow_seconds = 0);

  // Says goodbye to the peers and releases the connections. Idempotent.
  void close();

  struct Impl;

 private:
  friend struct RingInternals;  // the library's own tools (ring/internals.hpp)
  explicit Ring(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringattn
