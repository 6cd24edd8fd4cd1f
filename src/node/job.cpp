#include "job.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/packing.hpp"
#include "../io/npy_reader.hpp"

namespace ringattn::node {

void declare_job_options(cli::Args& a, bool with_files) {
  if (with_files) {
    a.option("q", "FILE", "queries, float32 .npy [tokens, heads, head_dim]")
        .option("k", "FILE", "keys, float32 .npy [tokens, kv_heads, head_dim]")
        .option("v", "FILE", "values, float32 .npy [tokens, kv_heads, head_dim]");
  }
  a.option("nodes", "P", "ring size", "2")
      .option("layout", "L", "contiguous, zigzag or striped", "contiguous")
      .option("cu-seqlens", "FILE",
              "a packed batch: cumulative document lengths, comma-separated text (e.g. 0,100,137,1037); "
              "attention stays within each document, rows are balanced by document (--layout unused)")
      .flag("causal", "causal mask (key position <= query position)")
      .option("window", "W", "sliding window: query i sees keys i-W < j <= i")
      .option("dtype", "T", "fp32 or bf16: kernel inputs and the K/V wire format", "fp32")
      .option("threads", "T", "OpenMP threads per node (0: all cores)", "1")
      .option("isa", "NAME", "force an ISA path (" + isa_names() + ")")
      .option("timeout", "SEC", "deadline for connecting and for every network wait", "30")
      .option("decode", "K",
              "generate the last K tokens of every document one step at a time (Ring::decode on the KV cache the "
              "prefill left on the ranks) instead of in the prefill; needs --causal or --window",
              "0");
}

void read_job_options(const cli::Args& a, JobSpec& job) {
  job.nodes = a.integer("nodes", 1, 4096);
  job.layout = parse_layout(a.str("layout"));
  if (auto f = a.maybe("cu-seqlens")) {
    job.cu_seqlens_path = *f;
    job.cu_seqlens = read_cu_seqlens(*f);
  }
  auto& c = job.attention;
  c.dtype = parse_dtype(a.str("dtype"));
  c.threads = a.integer("threads", 0, kMaxThreads);  // 0: all cores
  if (auto w = a.maybe("window")) {
    c.mask = Mask::sliding_window(a.integer<std::int64_t>("window", 1, INT64_MAX));
  } else if (a.has("causal")) {
    c.mask = Mask::causal();
  }
  if (auto i = a.maybe("isa")) c.isa = parse_isa(*i);
  job.log_level = a.log_level().value_or("");
  job.decode_steps = a.integer("decode", 0, 1 << 20);
  if (job.decode_steps > 0 && c.mask.kind == MaskKind::none)
    throw InvalidArgument("--decode " + a.str("decode") + " needs --causal or --window: a generated token sees only "
                          "the tokens before it");
  job.timeout_seconds = a.seconds("timeout", 0.001, 86400);
}

void inspect_inputs(JobSpec& job) {
  const auto q = io::read_npy_header(job.q_path);
  const auto k = io::read_npy_header(job.k_path);
  const auto v = io::read_npy_header(job.v_path);
  auto dims = [](const io::NpyInfo& i) { return io::shape_to_string(i.shape); };
  if (q.shape.size() != 3)
    throw FileError(job.q_path + ": Q must be [tokens, heads, head_dim], got shape " + dims(q));
  if (k.shape.size() != 3)
    throw FileError(job.k_path + ": K must be [tokens, kv_heads, head_dim], got shape " + dims(k));
  if (v.shape != k.shape)
    throw FileError(job.v_path + ": V has shape " + dims(v) + " but K (" + job.k_path + ") has " + dims(k));
  if (k.shape[0] != q.shape[0])
    throw FileError(job.k_path + ": K has " + std::to_string(k.shape[0]) + " tokens but Q (" + job.q_path + ") has " +
                    std::to_string(q.shape[0]));
  if (k.shape[2] != q.shape[2])
    throw FileError(job.k_path + ": K has head_dim " + std::to_string(k.shape[2]) + " but Q (" + job.q_path + ") has " +
                    std::to_string(q.shape[2]));
  job.tokens = q.shape[0];
  job.attention.heads = q.shape[1];
  job.attention.kv_heads = k.shape[1];
  job.attention.head_dim = q.shape[2];
  BlockAttention check(job.attention);  // heads/kv_heads/head_dim/mask/isa, with names and values
  if (!job.cu_seqlens.empty() && job.cu_seqlens.back() != job.tokens)
    throw InvalidArgument("--cu-seqlens " + job.cu_seqlens_path + " covers " + std::to_string(job.cu_seqlens.back()) +
                          " tokens but Q (" + job.q_path + ") has " + std::to_string(job.tokens));
  job_shard(job, 0);  // enough tokens for the layout, or for the documents
}

std::vector<std::int64_t> read_cu_seqlens(const std::string& path) {
  // A regular file (not a FIFO or /dev/zero: io::PosixFile refuses them) of bounded size,
  // read once: 16 MiB is a million documents' cumulative lengths and more.
  constexpr std::uint64_t kMaxBytes = std::uint64_t{16} << 20;
  const io::PosixFile file = io::PosixFile::open_read(path);
  const std::uint64_t bytes = file.size();
  if (bytes > kMaxBytes)
    throw FileError(path + ": the --cu-seqlens file has " + std::to_string(bytes) + " bytes, more than the " +
                    std::to_string(kMaxBytes >> 20) + " MiB a list of cumulative lengths needs");
  std::string all(static_cast<std::size_t>(bytes), '\0');
  file.pread_exact(all.data(), all.size(), 0);
  for (char& c : all)
    if (c == ',' || c == '\n' || c == '\r' || c == '\t') c = ' ';
  std::vector<std::int64_t> cu;
  std::istringstream words(all);
  for (std::string w; words >> w;) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != w.size() || v < 0)
      throw FileError(path + ": entry " + std::to_string(cu.size()) + " = '" + w +
                      "' is not a non-negative integer (expected comma-separated cumulative lengths, e.g. 0,100,137)");
    cu.push_back(v);
  }
  try {
    check_cu_seqlens(cu);
  } catch (const InvalidArgument& e) {
    throw FileError(path + ": " + e.what());
  }
  return cu;
}

std::vector<std::int64_t> job_documents(const JobSpec& job) {
  if (!job.cu_seqlens.empty()) return job.cu_seqlens;
  return {0, job.tokens};
}

bool is_decode_row(const JobSpec& job, const std::vector<std::int64_t>& documents, std::int32_t doc, std::int64_t position) {
  return position >= documents[static_cast<std::size_t>(doc) + 1] - job.decode_steps;
}

namespace {

// A --decode job's shard: the prefill share and the owned documents' decode tokens, sorted.
// The prompts of a --decode job as cu_seqlens: every document without its last K tokens.
std::vector<std::int64_t> prompt_cu_seqlens(const JobSpec& job, const std::vector<std::int64_t>& cu) {
  const auto K = static_cast<std::int64_t>(job.decode_steps);
  std::vector<std::int64_t> cu_pre = {0};
  for (std::size_t d = 0; d + 1 < cu.size(); ++d) {
    const std::int64_t len = cu[d + 1] - cu[d];
    if (len <= K)
      throw InvalidArgument("--decode " + std::to_string(K) + ": document " + std::to_string(d) + " has " +
                            std::to_string(len) + " tokens; every document needs a prompt of at least one token "
                            "before the K it generates");
    cu_pre.push_back(cu_pre.back() + len - K);
  }
  if (cu_pre.back() < job.nodes)
    throw InvalidArgument("--decode " + std::to_string(K) + ": the prompts hold " + std::to_string(cu_pre.back()) +
                          " tokens, fewer than the " + std::to_string(job.nodes) + " nodes");
  return cu_pre;
}

// Decode tokens rank `rank` owns: K for each document d with d mod P == rank.
std::int64_t owned_decode_rows(const JobSpec& job, std::size_t documents, int rank) {
  const auto P = static_cast<std::size_t>(job.nodes), r = static_cast<std::size_t>(rank);
  const std::size_t owned = documents > r ? (documents - r + P - 1) / P : 0;
  return static_cast<std::int64_t>(owned) * job.decode_steps;
}

JobShard decode_shard(const JobSpec& job, int rank) {
  const auto cu = job_documents(job);
  const auto K = static_cast<std::int64_t>(job.decode_steps);
  const auto cu_pre = prompt_cu_seqlens(job, cu);
  auto pre = shard_documents(cu_pre, job.nodes).at(static_cast<std::size_t>(rank));
  std::vector<std::pair<std::int64_t, std::int32_t>> rows;
  for (std::size_t i = 0; i < pre.positions.size(); ++i) {
    const auto d = static_cast<std::size_t>(pre.documents[i]);
    rows.emplace_back(pre.positions[i] - cu_pre[d] + cu[d], pre.documents[i]);  // prompt space -> file rows
  }
  for (std::size_t d = static_cast<std::size_t>(rank); d + 1 < cu.size(); d += static_cast<std::size_t>(job.nodes))
    for (std::int64_t p = cu[d + 1] - K; p < cu[d + 1]; ++p) rows.emplace_back(p, static_cast<std::int32_t>(d));
  std::sort(rows.begin(), rows.end());
  std::vector<std::int64_t> pos;
  std::vector<std::int32_t> docs;
  for (const auto& [p, d] : rows) {
    pos.push_back(p);
    docs.push_back(d);
  }
  return {Positions::from_sorted(pos.data(), static_cast<std::int64_t>(pos.size())), std::move(docs)};
}

}  // namespace

JobShard job_shard(const JobSpec& job, int rank) {
  if (job.decode_steps > 0) return decode_shard(job, rank);
  if (job.cu_seqlens.empty()) return {shard_positions(job.layout, job.tokens, job.nodes, rank), {}};
  auto shards = shard_documents(job.cu_seqlens, job.nodes);
  auto& s = shards.at(static_cast<std::size_t>(rank));
  return {Positions::from_sorted(s.positions.data(), static_cast<std::int64_t>(s.positions.size())),
          std::move(s.documents)};
}

std::int64_t max_job_rows(const JobSpec& job) {
  if (job.decode_steps > 0) {  // one sharding of the prompts, not one per rank
    const auto cu = job_documents(job);
    const auto pre = shard_documents(prompt_cu_seqlens(job, cu), job.nodes);
    std::int64_t most = 0;
    for (int r = 0; r < job.nodes; ++r)
      most = std::max(most, static_cast<std::int64_t>(pre[static_cast<std::size_t>(r)].positions.size()) +
                                owned_decode_rows(job, cu.size() - 1, r));
    return most;
  }
  if (job.cu_seqlens.empty()) return max_shard_rows(job.layout, job.tokens, job.nodes);
  std::int64_t most = 0;
  for (const auto& s : shard_documents(job.cu_seqlens, job.nodes))
    most = std::max(most, static_cast<std::int64_t>(s.positions.size()));
  return most;
}

std::vector<std::string> job_arguments(const JobSpec& job) {
  const auto& c = job.attention;
  std::vector<std::string> out = {"--q",      job.q_path,
                                  "--k",      job.k_path,
                                  "--v",      job.v_path,
                                  "--nodes",  std::to_string(job.nodes),
                                  "--layout", std::string(to_string(job.layout)),
                                  "--dtype",  std::string(to_string(c.dtype)),
                                  "--threads", std::to_string(c.threads)};
  std::ostringstream t;
  t << job.timeout_seconds;
  out.insert(out.end(), {"--timeout", t.str()});
  if (!job.cu_seqlens_path.empty()) out.insert(out.end(), {"--cu-seqlens", job.cu_seqlens_path});
  if (c.mask.kind == MaskKind::causal) out.push_back("--causal");
  if (c.mask.kind == MaskKind::window) out.insert(out.end(), {"--window", std::to_string(c.mask.window)});
  if (c.isa) out.insert(out.end(), {"--isa", std::string(to_string(*c.isa))});
  if (job.decode_steps > 0) out.insert(out.end(), {"--decode", std::to_string(job.decode_steps)});
  if (!job.log_level.empty()) out.insert(out.end(), {"--log-level", job.log_level});
  return out;
}

}  // namespace ringattn::node

namespace ringattn::node {

std::uint64_t job_digest(const JobSpec& job) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  const auto& c = job.attention;
  mix(static_cast<std::uint64_t>(job.layout));
  mix(static_cast<std::uint64_t>(job.tokens));
  mix(static_cast<std::uint64_t>(job.nodes));
  mix(static_cast<std::uint64_t>(c.heads));
  mix(static_cast<std::uint64_t>(c.kv_heads));
  mix(static_cast<std::uint64_t>(c.head_dim));
  mix(static_cast<std::uint64_t>(c.dtype));
  mix(static_cast<std::uint64_t>(c.mask.kind));
  mix(static_cast<std::uint64_t>(c.mask.window));
  mix(job.cu_seqlens.size());  // a packed batch: its documents too
  for (auto x : job.cu_seqlens) mix(static_cast<std::uint64_t>(x));
  mix(static_cast<std::uint64_t>(job.decode_steps));
  return h;
}

RingOptions ring_options(const JobSpec& job, int rank) {
  RingOptions o;
  o.rank = rank;
  o.world_size = job.nodes;
  o.job_digest = job_digest(job);
  o.threads = job.attention.threads;
  o.isa = job.attention.isa;
  o.timeout = job.timeout_seconds;
  o.connect_timeout = job.timeout_seconds;
  o.limits.max_rows = max_job_rows(job);
  o.limits.max_heads = job.attention.heads;
  o.limits.max_kv_heads = job.attention.kv_heads;
  o.limits.max_head_dim = job.attention.head_dim;
  return o;
}

AttentionSpec attention_spec(const JobSpec& job) { return job.attention; }  // the shape, without how it runs

}  // namespace ringattn::node
