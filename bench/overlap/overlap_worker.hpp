// `ringattn bench overlap` — one ring member of the sweep (a process the front starts,
// possibly inside a network namespace through a launch prefix).
//
// The member runs on its own share of the machine: it pins itself (and so its kernel
// threads and its transport's I/O thread, which inherit the mask) to `cores` CPUs of
// its own, as a ring node owns its server. Its socket copies therefore compete with its
// own matmuls, which is the CPU cost of TCP the sweep sets out to measure.
//
// For each mask and block size, every member runs the same rounds of four steps (the
// exchanges pair up because every member runs the same sequence; a tiny ring all-reduce
// agrees on the number of rounds):
//   compute   fold(Q, A) alone                       -> T_c, F
//   transfer  isend(A), irecv(B), wait both, swap     -> T_x, B, CPU s per byte
//   serial    fold(Q, A), then the transfer           -> T_s
//   overlap   isend(A), irecv(B), fold(Q, A), wait    -> T_o (and the fold's own time)
// Interleaving the kinds makes their ratios immune to slow drifts of a shared machine.
// The transfers and the overlap step are the ring's own step (ring/ring_step.hpp,
// which Ring::forward drives): blocks really travel around the ring with their
// positions, are checked and relayed with the CRC they arrived with, and each fold uses
// the positions of the rank that owns the block in A.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringattn/ring.hpp"
#include "ringattn/types.hpp"

namespace ringattn::bench::overlap {

struct SweepSpec {
  std::vector<std::int64_t> blocks;
  std::int64_t heads = 32, kv_heads = 32, head_dim = 128;
  DType dtype = DType::bf16;
  std::vector<std::string> masks = {"none", "causal"};
  int nodes = 2;
  int cores = 1;              // CPUs per node
  double min_seconds = 1.0;   // of timed steps per kind and block size (at least 5 rounds)
  int max_reps = 40;
  double timeout_seconds = 300;
  int io_priority = 0;        // nice levels the I/O thread runs above the kernel threads
  // The backward ring's step instead (Ring::backward): the kernel is the block backward
  // (BlockAttentionBackward), the pass carries the K/V block and, one frame behind it on
  // the same link, a block's fp32 dK/dV accumulators.
  bool backward = false;
};

struct MemberNet {
  int rank = 0;
  std::string peers = "-";    // host:port per rank, or "-": the rendezvous at `listen`
  std::string listen;         // this member's address, or (peers "-") the rendezvous
  std::uint64_t ring_id = 1;
};

// The ring options of member `rank` of this sweep: limits for its largest block, its
// shape and sizes in the job digest (the front fingerprints them).
RingOptions member_options(const SweepSpec& spec, int rank);

// Runs the sweep as one member; prints "INFO ..." once and a "ROW ..." line per mask
// and block size on stdout. Throws ringattn::Error on any failure.
void run_member(const SweepSpec& spec, const MemberNet& net);

// Useful FLOP/s of the kernel at block size b (mask none) on node 0's CPUs, while every
// other node's kernel runs too, as during the sweep (median over at least a second).
double measure_flops(const SweepSpec& spec, std::int64_t b);

// The CPUs node `rank` runs on: the `cores` allowed CPUs starting at rank·cores
// (wrapping around when nodes·cores exceeds the machine).
std::vector<int> node_cpus(int rank, int cores);

}  // namespace ringattn::bench::overlap
