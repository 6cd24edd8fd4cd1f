// ringattn — the description of one ring job that the coordinator hands to every node
// (as command-line options) and the checks both apply to the input files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringattn/block_attention.hpp"
#include "ringattn/ring.hpp"
#include "../cli/args.hpp"
#include "ringattn/layout.hpp"

namespace ringattn::node {

struct JobSpec {
  std::string q_path, k_path, v_path;
  Layout layout = Layout::contiguous;
  AttentionConfig attention;  // heads, kv_heads, head_dim come from the files
  std::int64_t tokens = 0;
  int nodes = 1;
  double timeout_seconds = 30;
  std::string log_level;  // passed on to the nodes as --log-level; empty: not passed
  // A packed batch (--cu-seqlens FILE): the documents' cumulative lengths, flash-attn's
  // cu_seqlens. Empty: one sequence, sharded by `layout`. Given: the rows are sharded
  // by shard_documents() (packing.hpp; `layout` is not used) and every query sees only
  // the keys of its own document.
  std::string cu_seqlens_path;
  std::vector<std::int64_t> cu_seqlens;
  // --decode K: the last K tokens of every document (of the sequence without
  // --cu-seqlens) are generated, one per document per step, by Ring::decode over the KV
  // cache that the prefill of the earlier tokens left on the ranks; document d's tokens
  // are owned by rank d mod P. O is the same attention as without (the mask must be
  // causal or a window), computed the way generation computes it.
  int decode_steps = 0;
};

// The documents of a job: --cu-seqlens, or the one sequence as one document.
std::vector<std::int64_t> job_documents(const JobSpec& job);
// Whether the row at `position` of document `doc` is one of its --decode tokens.
bool is_decode_row(const JobSpec& job, const std::vector<std::int64_t>& documents, std::int32_t doc, std::int64_t position);

// One rank's rows of a job: their global positions (rows of the input and output
// files) and, for a packed batch or a --decode job, their document ids (else empty). A
// --decode job's rows are the rank's balanced share of the prefill tokens
// (shard_documents over the documents without their last K tokens) and the decode
// tokens of the documents it owns. The node reads and
// forwards these rows and the coordinator writes them back: one definition for both.
struct JobShard {
  Positions positions;
  std::vector<std::int32_t> documents;
};
JobShard job_shard(const JobSpec& job, int rank);
// The most rows any rank of the job holds.
std::int64_t max_job_rows(const JobSpec& job);

// A --cu-seqlens file: a text file of cumulative lengths separated by commas (spaces
// and newlines allowed), starting at 0, e.g. "0,100,137,1037" for documents of 100, 37
// and 900 tokens. Throws FileError naming the file and the bad entry.
std::vector<std::int64_t> read_cu_seqlens(const std::string& path);

// Declares the job options shared by `run`, `node`, `verify` and `bench ring`.
void declare_job_options(cli::Args& a, bool with_files);
// Reads them back (dtype, mask, layout, threads, isa, timeout, nodes, cu_seqlens (the
// file is read), and the command line's log level).
void read_job_options(const cli::Args& a, JobSpec& job);

// Reads the .npy headers and checks that Q is [N, H, D], K and V are [N, KV, D] with
// the same N, KV dividing H, D supported, and N large enough for the layout. Fills
// tokens/heads/kv_heads/head_dim. Throws FileError / InvalidArgument naming the file
// and the disagreeing dimension.
void inspect_inputs(JobSpec& job);

// The options to pass to a node process for this job (everything but rank and peers).
std::vector<std::string> job_arguments(const JobSpec& job);

// What every rank of this job must agree on beyond the call's spec (layout, tokens...):
// its ring's job digest.
std::uint64_t job_digest(const JobSpec& job);
// The ring options of `rank` for this job: limits sized to its shards, threads, ISA,
// timeouts, the digest (peers, token and transport options are the caller's).
RingOptions ring_options(const JobSpec& job, int rank);
// The call of this job.
AttentionSpec attention_spec(const JobSpec& job);

}  // namespace ringattn::node
