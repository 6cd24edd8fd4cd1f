// infer — prefill and decode of one batch (the schedule is in job.hpp).
#include "job.hpp"

#include <ringattn/block_attention.hpp>
#include <ringattn/error.hpp>
#include <ringattn/kv_cache.hpp>
#include <ringattn/layout.hpp>
#include <ringattn/packing.hpp>

#include "batch_plan.hpp"
#include "sampler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>

namespace infer {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The rows of `all` [*, width] at `rows`, in order.
std::vector<float> gather(const std::vector<float>& all, const std::vector<std::size_t>& rows, std::int64_t width) {
  std::vector<float> out;
  out.reserve(rows.size() * static_cast<std::size_t>(width));
  for (std::size_t r : rows) out.insert(out.end(), all.begin() + r * width, all.begin() + (r + 1) * width);
  return out;
}

// The ring's kernels take the head dims in ringattn::kSupportedHeadDims (multiples of 16
// from 32). A model with another (stories260K: 8) runs each head zero-padded to the next
// supported one: zero lanes change neither q·k nor p·v, and the scale stays 1/sqrt(d), so
// attention is exact; it costs padded/d times attention's bytes and FLOPs.
struct HeadPadding {
  std::int64_t d = 0, padded = 0;

  explicit HeadPadding(std::int64_t head_dim) : d(head_dim) {
    const auto* s = std::lower_bound(std::begin(ringattn::kSupportedHeadDims), std::end(ringattn::kSupportedHeadDims), head_dim);
    if (s == std::end(ringattn::kSupportedHeadDims))
      throw ringattn::InvalidArgument("head_dim " + std::to_string(head_dim) + " is above the ring's largest");
    padded = *s;  // the smallest supported one that holds head_dim
  }
  bool on() const { return padded != d; }
  // in [n, d] -> out [n, padded] (n = rows * heads), zeros after each head's d values.
  const std::vector<float>& pad(const std::vector<float>& in, std::vector<float>& out) const {
    if (!on()) return in;
    const std::size_t n = in.size() / static_cast<std::size_t>(d);
    out.assign(n * static_cast<std::size_t>(padded), 0.0f);
    for (std::size_t i = 0; i < n; ++i)
      std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(i * d), d, out.begin() + static_cast<std::ptrdiff_t>(i * padded));
    return out;
  }
  // in [n, padded] -> out [n, d].
  void unpad(const std::vector<float>& in, std::vector<float>& out) const {
    if (!on()) return;
    const std::size_t n = in.size() / static_cast<std::size_t>(padded);
    out.resize(n * static_cast<std::size_t>(d));
    for (std::size_t i = 0; i < n; ++i)
      std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(i * padded), d, out.begin() + static_cast<std::ptrdiff_t>(i * d));
  }
};

// One attention call's buffers at the ring's head dim: q, k, v padded, o as it comes.
struct PaddedCall {
  std::vector<float> q, k, v, o;
};

constexpr std::uint32_t kLastRows = 0x4C48;  // a holder's last hidden rows, to the decode rank

// Where the batch runs: the whole ring, or (a tensor-parallel model) the ring across the
// mesh's groups, each group one rank of the batch's plan and every rank of it alike.
struct Place {
  ringattn::Scope scope;
  int rank, world;   // in the scope
  int group_size;    // ranks per group (1: no mesh)
  int group_rank;    // this rank's place in its group
  // The ring's rank of the scope's rank r (the one at this rank's place in r's group).
  int ring_rank(int r) const { return r * group_size + group_rank; }
};

Place place_of(ringattn::Ring& ring, const Model& model) {
  const TpParts& tp = model.parts();
  if (!tp.split()) return {ringattn::Scope::ring, ring.rank(), ring.world_size(), 1, 0};
  const int T = ring.scope_size(ringattn::Scope::group), t = ring.scope_rank(ringattn::Scope::group);
  if (T != tp.shard.size || t != tp.shard.rank)
    throw ringattn::InvalidArgument("rank " + std::to_string(ring.rank()) + " holds tensor-parallel part " +
                                    std::to_string(tp.shard.rank) + " of " + std::to_string(tp.shard.size) +
                                    " of the model, but its place in the ring's groups is " + std::to_string(t) + " of " +
                                    std::to_string(T) + " (RingOptions::group_size must be the --tp, the part rank % tp)");
  return {ringattn::Scope::across, ring.scope_rank(ringattn::Scope::across), ring.scope_size(ringattn::Scope::across), T, t};
}

// A tensor-parallel model's group: the ring's collectives in its group scope.
class RingGroup : public TpGroup {
 public:
  explicit RingGroup(ringattn::Ring& ring) : ring_(ring) {}
  void sum(std::span<float> data) override {
    if (!data.empty()) ring_.all_reduce(data, ringattn::Scope::group);
  }
  void gather(std::span<float> data, std::span<const std::size_t> counts) override {
    ring_.all_gather(data, counts, ringattn::Scope::group);
  }

 private:
  ringattn::Ring& ring_;
};

// After the prefill: every prompt's last hidden row goes to rank `to` (of the place's
// scope), which then owns every prompt (in prompt order); the others own none. Each holder
// sends its rows in one message, in its row order (= prompt order); `to` knows from the
// shards what comes from whom.
void move_last_rows(ringattn::Ring& ring, const Place& at, int to, const std::vector<ringattn::PackedShard>& shards,
                    const std::vector<std::int64_t>& cu, std::int64_t dim, std::vector<SequenceResult>& owned,
                    std::vector<float>& last_h) {
  const int world = at.world, rank = at.rank;
  if (to < 0 || to >= world)
    throw ringattn::InvalidArgument("decode rank " + std::to_string(to) + " is not a rank of a ring of " + std::to_string(world));
  if (rank != to) {
    if (!owned.empty()) {
      ringattn::MessageRequest s = ring.send_message(at.ring_rank(to), kLastRows, owned.size(), std::as_bytes(std::span(last_h)));
      ring.wait(s);
    }
    owned.clear();
    last_h.clear();
    return;
  }
  const std::size_t prompts = cu.size() - 1, row = static_cast<std::size_t>(dim);
  std::vector<float> all(prompts * row);
  for (std::size_t i = 0; i < owned.size(); ++i)
    std::copy_n(last_h.begin() + static_cast<std::ptrdiff_t>(i * row), row, all.begin() + static_cast<std::ptrdiff_t>(owned[i].prompt * row));
  for (int r = 0; r < world; ++r) {
    if (r == to) continue;
    std::vector<std::int32_t> held;  // the prompts whose last token rank r holds, in its row order
    for (std::size_t i = 0; i < shards[r].positions.size(); ++i) {
      const std::int32_t d = shards[r].documents[i];
      if (shards[r].positions[i] == cu[d + 1] - 1) held.push_back(d);
    }
    if (held.empty()) continue;
    std::vector<float> got(held.size() * row);
    ringattn::MessageRequest q = ring.receive_message(at.ring_rank(r), kLastRows, [&](const ringattn::MessageHeader& h) {
      if (h.bytes != got.size() * sizeof(float) || h.job != held.size()) return std::span<std::byte>();  // the ring fails
      return std::as_writable_bytes(std::span(got));
    });
    ring.wait(q);
    for (std::size_t i = 0; i < held.size(); ++i)
      std::copy_n(got.begin() + static_cast<std::ptrdiff_t>(i * row), row, all.begin() + static_cast<std::ptrdiff_t>(held[i] * row));
  }
  owned.clear();
  for (std::size_t d = 0; d < prompts; ++d) owned.push_back({static_cast<std::int32_t>(d), {}, {}, {}});
  last_h = std::move(all);
}

}  // namespace

std::int64_t cache_row_bytes(const ModelConfig& c, ringattn::DType dtype, int tp) {
  const std::int64_t kv_heads = TpParts::of(c, {0, tp}).kv_heads.count;
  return c.layers * 2 * kv_heads * HeadPadding(c.head_dim).padded * static_cast<std::int64_t>(ringattn::dtype_size(dtype));
}

void check_context(const std::vector<Prompt>& prompts, const JobOptions& options) {
  const std::int64_t context = options.model.context;
  if (context <= 0) return;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto n = static_cast<std::int64_t>(prompts[i].tokens.size());
    if (n + options.tokens > context)
      throw ringattn::InvalidArgument("prompt " + std::to_string(i) + " (id " + prompts[i].id + "): " + std::to_string(n) +
                                      " tokens and " + std::to_string(options.tokens) +
                                      " to generate exceed the model's trained context of " + std::to_string(context) +
                                      " positions (fewer --tokens, or a shorter prompt)");
  }
}

std::vector<SequenceResult> run_batch(ringattn::Ring& ring, const Model& model, const std::vector<Prompt>& prompts,
                                      const JobOptions& options, JobStats& stats, const TokenSink& on_token,
                                      std::vector<ringattn::KVCache>* kept) {
  const ModelConfig& c = model.config();
  const Place at = place_of(ring, model);
  const int rank = at.rank, world = at.world;  // the plan's: ranks across the groups under tensor parallelism
  RingGroup tp_group(ring);
  TpGroup* const group = model.parts().split() ? &tp_group : nullptr;
  const std::int64_t max_rows = ring.limits().max_rows;
  const BatchPlan plan = plan_batch(prompts, options, rank, world, max_rows, kept != nullptr);
  const std::vector<std::size_t>& fresh = plan.fresh;
  const std::vector<std::size_t>& follow = plan.follow;
  const std::vector<Continuation>& fed_from = plan.fed_from;
  const std::vector<std::int64_t>& cu = plan.cu;
  const std::vector<ringattn::PackedShard>& shards = plan.shards;
  const std::vector<std::int64_t>& positions = plan.shard.positions;
  const std::vector<std::int32_t>& documents = plan.shard.documents;  // index into `fresh`
  const std::vector<std::int32_t>& token_ids = plan.token_ids;
  const std::vector<std::int32_t>& row_ids = plan.row_ids;
  const std::vector<std::int64_t>& rope_pos = plan.rope_pos;
  const int steps = plan.steps;
  const std::int64_t rows = static_cast<std::int64_t>(positions.size());
  auto sequence_of = [&](std::size_t i) { return infer::sequence_of(prompts, i); };
  auto limit_of = [&](std::size_t i) { return infer::limit_of(prompts, options, i); };
  stats.rows = rows;

  ringattn::AttentionSpec spec;
  spec.heads = model.parts().heads.count;  // this rank's (all without tensor parallelism)
  spec.kv_heads = model.parts().kv_heads.count;
  const HeadPadding pad(c.head_dim);
  spec.head_dim = pad.padded;
  spec.scale = c.attention_scale > 0 ? static_cast<float>(c.attention_scale)
               : pad.on()             ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)))
                                      : 0.0f;
  spec.dtype = options.dtype;
  spec.mask = ringattn::Mask::causal();
  // Layer l's call: causal, or its sliding window (the model's sliding-window layers).
  auto layer_spec = [&](std::int64_t l) {
    ringattn::AttentionSpec s = spec;
    if (const std::int64_t w = c.layer_window(l)) s.mask = ringattn::Mask::sliding_window(w);
    return s;
  };
  PaddedCall pc;
  // The ring's o of a call: straight into o without padding, else through pc.o.
  auto attention_out = [&](std::vector<float>& o) -> std::vector<float>& {
    if (!pad.on()) return o;
    pc.o.resize(o.size() / static_cast<std::size_t>(pad.d) * static_cast<std::size_t>(pad.padded));
    return pc.o;
  };
  const std::int64_t qd = spec.heads * c.head_dim, kd = spec.kv_heads * c.head_dim;
  std::vector<ringattn::KVCache> local;  // one per layer: this rank's K/V rows, then its share of decode's
  std::vector<ringattn::KVCache>& caches = kept ? *kept : local;
  if (caches.empty())
    for (std::int64_t l = 0; l < c.layers; ++l) caches.emplace_back(spec.kv_heads, pad.padded, options.dtype);
  if (static_cast<std::int64_t>(caches.size()) != c.layers || caches[0].kv_heads() != spec.kv_heads ||
      caches[0].head_dim() != pad.padded || caches[0].dtype() != options.dtype)
    throw ringattn::InvalidArgument("the kept caches were made for another model or dtype");

  // One decode call per layer of `n` tokens: this rank's rows [n, ...] of h go through
  // the layer, their K/V appended to its cache where decode_store_rank puts them.
  struct DecodeRows {
    std::vector<std::int32_t> sequences;
    std::vector<std::int64_t> ring_pos, rope_pos;
    std::vector<float> h, q, k, v, o;
  };
  auto decode_layer = [&](std::int64_t l, DecodeRows& d) {
    const std::size_t n = d.sequences.size();
    d.q.resize(n * static_cast<std::size_t>(qd));
    d.k.resize(n * static_cast<std::size_t>(kd));
    d.v.resize(d.k.size());
    d.o.resize(d.q.size());
    model.attention_inputs(static_cast<int>(l), d.h, d.rope_pos, d.q, d.k, d.v);
    auto& out = attention_out(d.o);
    const ringattn::DecodeStats st = ring.decode_in(at.scope, layer_spec(l), caches[static_cast<std::size_t>(l)], d.sequences,
                                                    d.ring_pos, pad.pad(d.q, pc.q), pad.pad(d.k, pc.k), pad.pad(d.v, pc.v), out);
    pad.unpad(out, d.o);
    model.attention_output_and_mlp(static_cast<int>(l), d.o, d.h, group);
    return st;
  };

  // ---- prefill (and the follow-ups' new tokens, on the decode rank)
  const double t0 = now();
  std::vector<float> h(static_cast<std::size_t>(rows * c.dim));
  model.embed(token_ids, h, group);
  std::vector<float> q(static_cast<std::size_t>(rows * qd)), k(static_cast<std::size_t>(rows * kd)), v(k.size()),
      o(q.size());
  const int feeder = options.decode_rank.value_or(0);  // feeds the follow-ups (and a batch too short to cut)
  const bool feeds = !follow.empty() && rank == feeder;
  DecodeRows fed;  // the follow-ups' tokens, in prompt order
  std::vector<std::size_t> fed_last;  // the row of each follow-up's last token in fed
  if (feeds) {
    std::vector<std::int32_t> ids;
    for (std::size_t f = 0; f < follow.size(); ++f) {
      const std::size_t i = follow[f];
      const Continuation& from = fed_from[f];
      for (std::size_t t = 0; t < prompts[i].tokens.size(); ++t) {
        ids.push_back(prompts[i].tokens[t]);
        fed.sequences.push_back(sequence_of(i));
        fed.ring_pos.push_back(from.ring_position + static_cast<std::int64_t>(t));
        fed.rope_pos.push_back(from.rope_position + static_cast<std::int64_t>(t));
      }
      fed_last.push_back(ids.size() - 1);
    }
    fed.h.resize(ids.size() * static_cast<std::size_t>(c.dim));
    model.embed(ids, fed.h, group);
    stats.continued_tokens = static_cast<std::int64_t>(ids.size());
  }
  // Each sequence's rows on this rank, reserved once per layer: its prefill rows here and its
  // share of the tokens decode appends (decode_store_rank deals them round robin), so that
  // no append in the decode loop copies a long cache (at 64k tokens that was 256 MiB per
  // rank and layer in one step) or leaves it at twice its size.
  std::map<std::int32_t, std::int64_t> growth;
  for (const std::int32_t id : row_ids) ++growth[id];
  for (std::size_t i = 0; i < prompts.size(); ++i) growth[sequence_of(i)] += limit_of(i) / world + 2;
  for (const std::size_t i : follow) growth[sequence_of(i)] += static_cast<std::int64_t>(prompts[i].tokens.size()) / world + 1;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const double tl = now();
    double attention = 0;
    ringattn::KVCache& cache = caches[static_cast<std::size_t>(l)];
    for (const auto& [id, more] : growth) cache.reserve(id, cache.rows(id) + more);
    if (!fresh.empty()) {
      model.attention_inputs(static_cast<int>(l), h, rope_pos, q, k, v);
      const auto& qp = pad.pad(q, pc.q);
      const auto& kp = pad.pad(k, pc.k);
      const auto& vp = pad.pad(v, pc.v);
      auto& out = attention_out(o);
      const ringattn::ForwardStats st = ring.forward_in(at.scope, layer_spec(l), qp, kp, vp, positions, row_ids, out);
      pad.unpad(out, o);
      attention += st.seconds;
      caches[static_cast<std::size_t>(l)].append_packed(positions, row_ids, kp, vp);
      model.attention_output_and_mlp(static_cast<int>(l), o, h, group);
    }
    if (!follow.empty()) attention += decode_layer(l, fed).seconds;  // 0 tokens off the decode rank
    stats.prefill_attention_seconds += attention;
    if (options.progress)
      std::fprintf(stderr, "infer: rank %d/%d prefill layer %lld/%lld: %lld rows, %.3f s (attention %.3f s)\n", ring.rank(),
                 ring.world_size(), static_cast<long long>(l + 1), static_cast<long long>(c.layers),
                 static_cast<long long>(rows), now() - tl, attention);
  }

  // The prompts whose last token is here are this rank's to generate (or, with a
  // decode_rank, that rank's: the last hidden rows go there).
  std::vector<SequenceResult> owned;
  std::vector<std::size_t> last_rows;
  for (std::int64_t r = 0; r < rows; ++r)
    if (positions[r] == cu[documents[r] + 1] - 1) {
      owned.push_back({documents[r], {}, {}, {}});
      last_rows.push_back(static_cast<std::size_t>(r));
    }
  std::vector<float> last_h = gather(h, last_rows, c.dim);
  if (options.decode_rank && !fresh.empty()) move_last_rows(ring, at, *options.decode_rank, shards, cu, c.dim, owned, last_h);
  DecodeRows live;  // the tokens of the next step: for each owned prompt, its next position
  for (SequenceResult& s : owned) {  // fresh: documents index `fresh`
    const std::int32_t d = s.prompt;
    s.prompt = static_cast<std::int32_t>(fresh[static_cast<std::size_t>(d)]);
    s.next.ring_position = cu[d + 1];
    // The trap's decode stays consistent with its prefill at P = 1 (row index = packed
    // position there), so a single process cannot tell the two apart.
    s.next.rope_position = options.rope == RopePositions::global ? cu[d + 1] - cu[d] : cu[d + 1];
  }
  if (feeds)
    for (std::size_t f = 0; f < follow.size(); ++f) {
      const std::size_t i = follow[f];
      SequenceResult s{static_cast<std::int32_t>(i), {}, {}, fed_from[f]};
      s.next.ring_position += static_cast<std::int64_t>(prompts[i].tokens.size());
      s.next.rope_position += static_cast<std::int64_t>(prompts[i].tokens.size());
      owned.push_back(std::move(s));
      const auto row = fed.h.begin() + static_cast<std::ptrdiff_t>(fed_last[f] * c.dim);
      last_h.insert(last_h.end(), row, row + c.dim);
    }
  const std::size_t n = owned.size();
  std::vector<float> logits(n * static_cast<std::size_t>(c.vocab));
  std::vector<Sampler> samplers;  // one per owned prompt, seeded by the prompt: the same at every P
  for (const SequenceResult& s : owned) {
    const std::optional<Sampling>& own = prompts[static_cast<std::size_t>(s.prompt)].sampling;
    if (own) samplers.emplace_back(own->temperature, own->top_p, own->seed);
    else samplers.emplace_back(options.temperature, options.top_p, options.sample_seed + static_cast<std::uint64_t>(s.prompt));
  }
  std::vector<char> done(n, 0);
  std::vector<std::size_t> stepping;  // the owned prompts fed this step, in order
  for (std::size_t i = 0; i < n; ++i) stepping.push_back(i);
  // Chooses each stepping prompt's next token from logits [stepping, vocab].
  // A group's ranks feed the same prompts: a prompt one of them stops (its sink said so:
  // only the rank that streams has one) stops on all of them.
  std::vector<float> stops;
  auto choose = [&] {
    stops.assign(stepping.size(), 0.0F);
    for (std::size_t j = 0; j < stepping.size(); ++j) {
      const std::size_t i = stepping[j];
      const std::span<const float> row(&logits[j * c.vocab], static_cast<std::size_t>(c.vocab));
      const std::int32_t t = samplers[i].next(row);
      owned[i].tokens.push_back(t);
      owned[i].logits.insert(owned[i].logits.end(), row.begin(), row.end());
      if (on_token && !on_token(owned[i].prompt, t)) stops[j] = 1.0F;
    }
    if (group && options.stop_at_end && !stops.empty()) group->sum(stops);
    for (std::size_t j = 0; j < stepping.size(); ++j) {
      const std::size_t i = stepping[j];
      const std::int32_t t = owned[i].tokens.back();
      const bool ended = options.stop_at_end && (stops[j] > 0 || options.ends_text(t));
      if (ended || static_cast<int>(owned[i].tokens.size()) >= limit_of(static_cast<std::size_t>(owned[i].prompt))) done[i] = 1;
    }
  };
  model.logits(last_h, logits, group);
  choose();
  stats.prefill_seconds = now() - t0;

  // ---- decode: up to steps - 1 steps (the first token came from the prefill's logits)
  const double t1 = now();
  for (int s = 0; s + 1 < steps; ++s) {
    const double ts = now();
    stepping.clear();
    for (std::size_t i = 0; i < n; ++i)
      if (!done[i]) stepping.push_back(i);
    live.sequences.clear();
    live.ring_pos.clear();
    live.rope_pos.clear();
    std::vector<std::int32_t> step_tokens;
    for (const std::size_t i : stepping) {
      live.sequences.push_back(sequence_of(static_cast<std::size_t>(owned[i].prompt)));
      live.ring_pos.push_back(owned[i].next.ring_position++);
      live.rope_pos.push_back(options.rope == RopePositions::global ? owned[i].next.rope_position++ : live.ring_pos.back());
      step_tokens.push_back(owned[i].tokens.back());
    }
    live.h.resize(stepping.size() * static_cast<std::size_t>(c.dim));
    model.embed(step_tokens, live.h, group);
    double attention = 0;
    bool any = true;
    for (std::int64_t l = 0; l < c.layers; ++l) {
      const ringattn::DecodeStats st = decode_layer(l, live);
      attention += st.seconds;
      stats.decode_compute_seconds += st.compute_seconds;
      if (st.tokens == 0) {  // no rank fed a token: every rank saw the same count, and stops
        any = false;
        break;
      }
    }
    stats.decode_attention_seconds += attention;
    if (!any) break;
    logits.resize(stepping.size() * static_cast<std::size_t>(c.vocab));
    model.logits(live.h, logits, group);
    choose();
    ++stats.decode_steps;
    if (options.progress)
      std::fprintf(stderr, "infer: rank %d/%d decode step %d/%d: %zu tokens here, %.4f s (attention %.4f s)\n", ring.rank(),
                 ring.world_size(), s + 1, steps - 1, stepping.size(), now() - ts, attention);
  }
  stats.decode_seconds = now() - t1;
  for (const ringattn::KVCache& cache : caches) stats.kv_cache_bytes += cache.bytes();
  if (kept)  // what stays holds its rows only: the growth reserved for max_tokens goes back
    for (std::size_t i = 0; i < prompts.size(); ++i)
      for (ringattn::KVCache& cache : caches) {
        if (prompts[i].keep) cache.shrink(sequence_of(i));
        else cache.erase(sequence_of(i));
      }
  return owned;
}

}  // namespace infer
