#include "decode_job.hpp"

#include <algorithm>

#include "../cli/log.hpp"
#include "ringattn/kv_cache.hpp"

namespace ringattn::node {

namespace {

// The rows `idx` of a [rows, width] tensor.
std::vector<float> pick(std::span<const float> t, const std::vector<std::size_t>& idx, std::size_t width) {
  std::vector<float> out(idx.size() * width);
  for (std::size_t i = 0; i < idx.size(); ++i)
    std::copy_n(t.begin() + static_cast<std::ptrdiff_t>(idx[i] * width), width, out.begin() + static_cast<std::ptrdiff_t>(i * width));
  return out;
}

void put(std::span<float> t, const std::vector<std::size_t>& idx, const std::vector<float>& rows, std::size_t width) {
  for (std::size_t i = 0; i < idx.size(); ++i)
    std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(i * width), width, t.begin() + static_cast<std::ptrdiff_t>(idx[i] * width));
}

}  // namespace

ForwardStats run_decode_job(Ring& ring, const JobSpec& job, const JobShard& shard, std::span<const float> q,
                            std::span<const float> k, std::span<const float> v, std::span<float> o, std::span<float> lse) {
  const auto& c = job.attention;
  const auto qw = static_cast<std::size_t>(c.heads * c.head_dim), kw = static_cast<std::size_t>(c.kv_heads * c.head_dim),
             lw = static_cast<std::size_t>(c.heads);
  const auto cu = job_documents(job);
  const auto positions = shard.positions.materialize();
  // Prefill rows, and per step the decode rows (document order within a step).
  std::vector<std::size_t> pre;
  std::vector<std::vector<std::size_t>> steps(static_cast<std::size_t>(job.decode_steps));
  for (std::size_t i = 0; i < positions.size(); ++i) {
    const std::int32_t d = shard.documents[i];
    if (!is_decode_row(job, cu, d, positions[i])) {
      pre.push_back(i);
      continue;
    }
    const auto s = static_cast<std::size_t>(positions[i] - (cu[static_cast<std::size_t>(d) + 1] - job.decode_steps));
    steps[s].push_back(i);
  }
  const AttentionSpec spec = attention_spec(job);
  std::vector<std::int64_t> pre_pos;
  std::vector<std::int32_t> pre_docs;
  for (auto i : pre) {
    pre_pos.push_back(positions[i]);
    pre_docs.push_back(shard.documents[i]);
  }
  const auto pk = pick(k, pre, kw), pv = pick(v, pre, kw);
  std::vector<float> po(pre.size() * qw), pl(pre.size() * lw);
  ForwardStats st = ring.forward({spec, pick(q, pre, qw), pk, pv, pre_pos, pre_docs}, po, pl);
  put(o, pre, po, qw);
  put(lse, pre, pl, lw);
  KVCache cache(c.kv_heads, c.head_dim, c.dtype);
  cache.append_packed(pre_pos, pre_docs, pk, pv);
  auto log = cli::logger("node");
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const auto& idx = steps[s];
    std::vector<std::int64_t> pos;
    std::vector<std::int32_t> seqs;
    for (auto i : idx) {
      pos.push_back(positions[i]);
      seqs.push_back(shard.documents[i]);
    }
    std::vector<float> so(idx.size() * qw), sl(idx.size() * lw);
    const DecodeStats ds = ring.decode({spec, pick(q, idx, qw), pick(k, idx, kw), pick(v, idx, kw), pos, seqs}, cache, so, sl);
    put(o, idx, so, qw);
    put(lse, idx, sl, lw);
    st.seconds += ds.seconds;
    st.compute_seconds += ds.compute_seconds;
    st.wait_seconds += ds.wait_seconds;
    st.useful_flops += ds.useful_flops;
    st.bytes_sent += ds.bytes_sent;
    log->info("decode step {} of {}: {} tokens, {:.2f} ms, {} bytes sent", s + 1, steps.size(), ds.tokens,
              1e3 * ds.seconds, ds.bytes_sent);
  }
  return st;
}

}  // namespace ringattn::node
