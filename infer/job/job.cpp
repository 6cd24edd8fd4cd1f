// infer — prefill and decode of one batch (the schedule is in job.hpp).
#include "job.hpp"

#include <ringattn/block_attention.hpp>
#include <ringattn/error.hpp>
#include <ringattn/kv_cache.hpp>
#include <ringattn/layout.hpp>
#include <ringattn/packing.hpp>

#include "batch_plan.hpp"
#include "batch_ring.hpp"
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

namespace {

// One batch's run: the plan, the attention call, the caches, then its phases (prefill, the
// first tokens, decode, keeping or dropping the rows), each a method over the state below.
class BatchRun {
 public:
  BatchRun(ringattn::Ring& ring, const Model& model, const std::vector<Prompt>& prompts, const JobOptions& options,
           JobStats& stats, const TokenSink& on_token, std::vector<ringattn::KVCache>* kept, const LogitsHook& shape)
      : ring_(ring), model_(model), c_(model.config()), prompts_(prompts), options_(options), stats_(stats),
        on_token_(on_token), shape_(shape), kept_(kept), at_(place_of(ring, model)), tp_group_(ring),
        group_(model.parts().split() ? &tp_group_ : nullptr),
        plan_(plan_batch(prompts, options, at_.rank, at_.world, ring.limits().max_rows, kept != nullptr)),
        pad_(c_.head_dim), caches_(kept ? *kept : local_) {
    stats_.rows = static_cast<std::int64_t>(plan_.shard.positions.size());
    spec_.heads = model.parts().heads.count;  // this rank's (all without tensor parallelism)
    spec_.kv_heads = model.parts().kv_heads.count;
    spec_.head_dim = pad_.padded;
    spec_.scale = c_.attention_scale > 0 ? static_cast<float>(c_.attention_scale)
                  : pad_.on()             ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(c_.head_dim)))
                                          : 0.0f;
    spec_.dtype = options.dtype;
    spec_.mask = ringattn::Mask::causal();
    if (group_ && options.stop_at_end && c_.vocab > (std::int64_t{1} << 24))  // choose() sums token ids as floats
      throw ringattn::InvalidArgument("a vocabulary of " + std::to_string(c_.vocab) + " tokens is above 2^24, the most a tensor-parallel group can choose from");
    qd_ = spec_.heads * c_.head_dim;
    kd_ = spec_.kv_heads * c_.head_dim;
    make_caches();
  }

  std::vector<SequenceResult> run() {
    t0_ = now();
    prefill();
    copy_samples();
    take_last_rows();
    first_tokens();
    stats_.prefill_seconds = now() - t0_;
    decode();
    finish();
    return std::move(owned_);
  }

 private:
  // The tokens of one decode call per layer: this rank's rows [n, ...] of h go through the
  // layer, their K/V appended to its cache where decode_store_rank puts them.
  struct DecodeRows {
    std::vector<std::int32_t> sequences;
    std::vector<std::int64_t> ring_pos, rope_pos;
    std::vector<float> h, q, k, v, o;
  };

  std::int32_t sequence_of(std::size_t i) const { return infer::sequence_of(prompts_, i); }
  std::int64_t limit_of(std::size_t i) const { return infer::limit_of(prompts_, options_, i); }

  // Layer l's call: causal, or its sliding window (the model's sliding-window layers).
  ringattn::AttentionSpec layer_spec(std::int64_t l) const {
    ringattn::AttentionSpec s = spec_;
    if (const std::int64_t w = c_.layer_window(l)) s.mask = ringattn::Mask::sliding_window(w);
    return s;
  }

  // The ring's o of a call: straight into o without padding, else through pc_.o.
  std::vector<float>& attention_out(std::vector<float>& o) {
    if (!pad_.on()) return o;
    pc_.o.resize(o.size() / static_cast<std::size_t>(pad_.d) * static_cast<std::size_t>(pad_.padded));
    return pc_.o;
  }

  void make_caches() {  // one per layer: this rank's K/V rows, then its share of decode's
    if (caches_.empty())
      for (std::int64_t l = 0; l < c_.layers; ++l) caches_.emplace_back(spec_.kv_heads, pad_.padded, options_.dtype);
    if (static_cast<std::int64_t>(caches_.size()) != c_.layers || caches_[0].kv_heads() != spec_.kv_heads ||
        caches_[0].head_dim() != pad_.padded || caches_[0].dtype() != options_.dtype)
      throw ringattn::InvalidArgument("the kept caches were made for another model or dtype");
  }

  ringattn::DecodeStats decode_layer(std::int64_t l, DecodeRows& d) {
    const std::size_t n = d.sequences.size();
    d.q.resize(n * static_cast<std::size_t>(qd_));
    d.k.resize(n * static_cast<std::size_t>(kd_));
    d.v.resize(d.k.size());
    d.o.resize(d.q.size());
    model_.attention_inputs(static_cast<int>(l), d.h, d.rope_pos, d.q, d.k, d.v);
    auto& out = attention_out(d.o);
    const ringattn::AttentionCall call{layer_spec(l),  pad_.pad(d.q, pc_.q), pad_.pad(d.k, pc_.k), pad_.pad(d.v, pc_.v),
                                      d.ring_pos,      d.sequences,         ringattn::Schedule::ring, at_.scope};
    const ringattn::DecodeStats st = ring_.decode(call, caches_[static_cast<std::size_t>(l)], out);
    pad_.unpad(out, d.o);
    model_.attention_output_and_mlp(static_cast<int>(l), d.o, d.h, group_);
    return st;
  }

  // The follow-ups' tokens (prompts continuing a kept sequence) this rank feeds (the plan's
  // follow_rows: a long one dealt over the ranks, a short one the decode rank's), in prompt
  // order, embedded; fed_last_ the rows of the last tokens it holds, in follow-up order.
  void embed_follow_ups() {
    const int feeder = options_.decode_rank.value_or(0);  // owns the follow-ups (and a batch too short to cut)
    feeds_ = !plan_.follow.empty() && at_.rank == feeder;
    std::vector<std::int32_t> ids;
    for (std::size_t f = 0; f < plan_.follow.size(); ++f) {
      const std::size_t i = plan_.follow[f];
      const Continuation& from = plan_.fed_from[f];
      const auto [first, end] = plan_.follow_rows[f];
      for (std::int64_t t = first; t < end; ++t) {
        ids.push_back(prompts_[i].tokens[static_cast<std::size_t>(t)]);
        fed_.sequences.push_back(sequence_of(i));
        fed_.ring_pos.push_back(from.ring_position + t);
        fed_.rope_pos.push_back(from.rope_position + t);
      }
      if (plan_.follow_last[f] == at_.rank) fed_last_.push_back(ids.size() - 1);
    }
    if (ids.empty()) return;
    fed_.h.resize(ids.size() * static_cast<std::size_t>(c_.dim));
    model_.embed(ids, fed_.h, group_);
    stats_.continued_tokens = static_cast<std::int64_t>(ids.size());
  }

  // Each sequence's rows on this rank, reserved once per layer: its prefill rows here and its
  // share of the tokens decode appends (decode_store_rank deals them round robin), so that
  // no append in the decode loop copies a long cache (at 64k tokens that was 256 MiB per
  // rank and layer in one step) or leaves it at twice its size.
  std::map<std::int32_t, std::int64_t> growth() const {
    std::map<std::int32_t, std::int64_t> g;
    for (const std::int32_t id : plan_.row_ids) ++g[id];
    for (std::size_t i = 0; i < prompts_.size(); ++i) g[sequence_of(i)] += limit_of(i) / at_.world + 2;
    for (const std::size_t i : plan_.follow)
      g[sequence_of(i)] += static_cast<std::int64_t>(prompts_[i].tokens.size()) / at_.world + 1;
    return g;
  }

  // The prefill (and the follow-ups' new tokens, on the decode rank), layer by layer.
  void prefill() {
    const std::int64_t rows = stats_.rows;
    h_.resize(static_cast<std::size_t>(rows * c_.dim));
    model_.embed(plan_.token_ids, h_, group_);
    std::vector<float> q(static_cast<std::size_t>(rows * qd_)), k(static_cast<std::size_t>(rows * kd_)), v(k.size()),
        o(q.size());
    embed_follow_ups();
    const std::map<std::int32_t, std::int64_t> more = growth();
    for (std::int64_t l = 0; l < c_.layers; ++l) {
      const double tl = now();
      double attention = 0;
      ringattn::KVCache& cache = caches_[static_cast<std::size_t>(l)];
      for (const auto& [id, extra] : more) cache.reserve(id, cache.rows(id) + extra);
      if (!plan_.fresh.empty()) {
        model_.attention_inputs(static_cast<int>(l), h_, plan_.rope_pos, q, k, v);
        const auto& kp = pad_.pad(k, pc_.k);
        const auto& vp = pad_.pad(v, pc_.v);
        auto& out = attention_out(o);
        const ringattn::AttentionCall call{layer_spec(l),         pad_.pad(q, pc_.q), kp, vp,
                                           plan_.shard.positions, plan_.row_ids,      ringattn::Schedule::ring, at_.scope};
        attention += ring_.forward(call, out).seconds;
        pad_.unpad(out, o);
        cache.append_packed(plan_.shard.positions, plan_.row_ids, kp, vp);
        model_.attention_output_and_mlp(static_cast<int>(l), o, h_, group_);
      }
      if (!plan_.follow.empty()) attention += decode_layer(l, fed_).seconds;  // 0 tokens off the decode rank
      stats_.prefill_attention_seconds += attention;
      if (options_.progress)
        std::fprintf(stderr, "infer: rank %d/%d prefill layer %lld/%lld: %lld rows, %.3f s (attention %.3f s)\n", ring_.rank(),
                     ring_.world_size(), static_cast<long long>(l + 1), static_cast<long long>(c_.layers),
                     static_cast<long long>(rows), now() - tl, attention);
    }
  }

  // Every rank: each sample's sequence gets a copy of its prompt's rows here (all layers).
  void copy_samples() {
    for (const std::size_t i : plan_.copies) {
      const std::int32_t from = sequence_of(static_cast<std::size_t>(prompts_[i].copy_of)), to = sequence_of(i);
      for (ringattn::KVCache& cache : caches_) {
        const ringattn::KVCache::View v = cache.view(from);
        if (v.positions.empty()) continue;
        const std::vector<std::int64_t> positions(v.positions.begin(), v.positions.end());  // the view goes with the append
        const auto* k = static_cast<const std::byte*>(v.k);
        const auto* vv = static_cast<const std::byte*>(v.v);
        const std::size_t bytes = positions.size() * static_cast<std::size_t>(cache.kv_heads() * cache.head_dim()) * ringattn::dtype_size(cache.dtype());
        const std::vector<std::byte> kc(k, k + bytes), vc(vv, vv + bytes);
        cache.append_raw(to, positions, kc.data(), vc.data());
      }
    }
  }

  // The prompts whose last token is here are this rank's to generate (or, with a
  // decode_rank, that rank's: the last hidden rows go there); then the follow-ups.
  void take_last_rows() {
    const std::vector<std::int64_t>& cu = plan_.cu;
    const std::vector<std::int64_t>& positions = plan_.shard.positions;
    const std::vector<std::int32_t>& documents = plan_.shard.documents;  // index into `fresh`
    std::vector<std::size_t> last_rows;
    for (std::size_t r = 0; r < positions.size(); ++r)
      if (positions[r] == cu[documents[r] + 1] - 1) {
        owned_.push_back({documents[r], {}, {}, {}});
        last_rows.push_back(r);
      }
    last_h_ = gather(h_, last_rows, c_.dim);
    if (options_.decode_rank && !plan_.fresh.empty())
      move_last_rows(ring_, at_, *options_.decode_rank, plan_.shards, cu, c_.dim, owned_, last_h_);
    for (SequenceResult& s : owned_) {  // fresh: documents index `fresh`
      const std::int32_t d = s.prompt;
      s.prompt = static_cast<std::int32_t>(plan_.fresh[static_cast<std::size_t>(d)]);
      s.next.ring_position = cu[d + 1];
      // The trap's decode stays consistent with its prefill at P = 1 (row index = packed
      // position there), so a single process cannot tell the two apart.
      s.next.rope_position = options_.rope == RopePositions::global ? cu[d + 1] - cu[d] : cu[d + 1];
    }
    if (!plan_.follow.empty()) {  // the follow-ups' last rows, to the decode rank
      std::vector<float> mine;
      for (const std::size_t r : fed_last_) {
        const auto row = fed_.h.begin() + static_cast<std::ptrdiff_t>(r * static_cast<std::size_t>(c_.dim));
        mine.insert(mine.end(), row, row + c_.dim);
      }
      const std::vector<float> rows =
          gather_follow_rows(ring_, at_, options_.decode_rank.value_or(0), plan_.follow_last, c_.dim, mine);
      if (feeds_) last_h_.insert(last_h_.end(), rows.begin(), rows.end());
    }
    if (feeds_)
      for (std::size_t f = 0; f < plan_.follow.size(); ++f) {
        const std::size_t i = plan_.follow[f];
        SequenceResult s{static_cast<std::int32_t>(i), {}, {}, plan_.fed_from[f]};
        s.next.ring_position += static_cast<std::int64_t>(prompts_[i].tokens.size());
        s.next.rope_position += static_cast<std::int64_t>(prompts_[i].tokens.size());
        owned_.push_back(std::move(s));
      }
    // A sample goes where its prompt's last row is: the same row, the same next position.
    for (const std::size_t i : plan_.copies) {
      const auto src = std::find_if(owned_.begin(), owned_.end(), [&](const SequenceResult& s) { return s.prompt == prompts_[i].copy_of; });
      if (src == owned_.end()) continue;
      const std::size_t k = static_cast<std::size_t>(src - owned_.begin());
      owned_.push_back({static_cast<std::int32_t>(i), {}, {}, src->next});
      const std::vector<float> row(last_h_.begin() + static_cast<std::ptrdiff_t>(k * c_.dim), last_h_.begin() + static_cast<std::ptrdiff_t>((k + 1) * c_.dim));
      last_h_.insert(last_h_.end(), row.begin(), row.end());
    }
  }

  // The samplers (one per owned prompt, seeded by the prompt: the same at every P) and the
  // first token of each, from the prefill's last rows.
  void first_tokens() {
    for (const SequenceResult& s : owned_) {
      const std::optional<Sampling>& own = prompts_[static_cast<std::size_t>(s.prompt)].sampling;
      if (own) samplers_.emplace_back(own->temperature, own->top_p, own->seed);
      else samplers_.emplace_back(options_.temperature, options_.top_p, options_.sample_seed + static_cast<std::uint64_t>(s.prompt));
    }
    done_.assign(owned_.size(), 0);
    for (std::size_t i = 0; i < owned_.size(); ++i) stepping_.push_back(i);
    logits_.resize(owned_.size() * static_cast<std::size_t>(c_.vocab));
    model_.logits(last_h_, logits_, group_);
    choose();
  }

  // Chooses each stepping prompt's next token from logits_ [stepping, vocab] (shaped by
  // shape_, where there is one). A group's ranks feed the same prompts: with stop_at_end
  // the group's first rank decides for all — the tokens it chose (its hook may shape what
  // the others cannot see) and the prompts it stops (its sink said so: only the rank that
  // streams has one) — in one sum over the group, the others adding zeros.
  void choose() {
    const std::size_t n = stepping_.size();
    const bool one_voice = group_ && options_.stop_at_end && n > 0;
    stops_.assign(one_voice ? 2 * n : n, 0.0F);  // [stops, chosen ids]
    for (std::size_t j = 0; j < n; ++j) {
      SequenceResult& s = owned_[stepping_[j]];
      const std::span<const float> row(&logits_[j * c_.vocab], static_cast<std::size_t>(c_.vocab));
      std::span<const float> from = row;
      if (shape_) {
        shaped_.assign(row.begin(), row.end());
        shape_(s.prompt, shaped_);
        from = shaped_;
      }
      const std::int32_t t = samplers_[stepping_[j]].next(from);
      if (on_token_ && !on_token_({s.prompt, t, row, step_})) stops_[j] = 1.0F;
      if (one_voice) stops_[n + j] = at_.group_rank == 0 ? static_cast<float>(t) : 0.0F;  // ids < 2^24: exact
      else s.tokens.push_back(t);
      if (!one_voice) s.logits.insert(s.logits.end(), row.begin(), row.end());
    }
    if (one_voice) {
      group_->sum(stops_);
      for (std::size_t j = 0; j < n; ++j) {
        SequenceResult& s = owned_[stepping_[j]];
        s.tokens.push_back(static_cast<std::int32_t>(stops_[n + j]));
        s.logits.insert(s.logits.end(), logits_.begin() + static_cast<std::ptrdiff_t>(j * c_.vocab),
                        logits_.begin() + static_cast<std::ptrdiff_t>((j + 1) * c_.vocab));
      }
    }
    for (std::size_t j = 0; j < n; ++j) {
      const SequenceResult& s = owned_[stepping_[j]];
      const bool ended = options_.stop_at_end && (stops_[j] > 0 || options_.ends_text(s.tokens.back()));
      if (ended || static_cast<int>(s.tokens.size()) >= limit_of(static_cast<std::size_t>(s.prompt))) done_[stepping_[j]] = 1;
    }
  }

  // The next step's tokens (each unfinished owned prompt's last, at its next position), embedded.
  void next_rows() {
    stepping_.clear();
    for (std::size_t i = 0; i < owned_.size(); ++i)
      if (!done_[i]) stepping_.push_back(i);
    live_.sequences.clear();
    live_.ring_pos.clear();
    live_.rope_pos.clear();
    std::vector<std::int32_t> step_tokens;
    for (const std::size_t i : stepping_) {
      SequenceResult& s = owned_[i];
      live_.sequences.push_back(sequence_of(static_cast<std::size_t>(s.prompt)));
      live_.ring_pos.push_back(s.next.ring_position++);
      live_.rope_pos.push_back(options_.rope == RopePositions::global ? s.next.rope_position++ : live_.ring_pos.back());
      step_tokens.push_back(s.tokens.back());
    }
    live_.h.resize(stepping_.size() * static_cast<std::size_t>(c_.dim));
    model_.embed(step_tokens, live_.h, group_);
  }

  // Up to steps - 1 steps (the first token came from the prefill's logits); a step where no
  // rank fed a token (every rank saw the same count) ends the loop on every rank.
  void decode() {
    const double t1 = now();
    for (int s = 0; s + 1 < plan_.steps; ++s) {
      const double ts = now();
      next_rows();
      double attention = 0;
      bool any = true;
      for (std::int64_t l = 0; l < c_.layers && any; ++l) {
        const ringattn::DecodeStats st = decode_layer(l, live_);
        attention += st.seconds;
        stats_.decode_compute_seconds += st.compute_seconds;
        any = st.tokens != 0;
      }
      stats_.decode_attention_seconds += attention;
      if (!any) break;
      logits_.resize(stepping_.size() * static_cast<std::size_t>(c_.vocab));
      model_.logits(live_.h, logits_, group_);
      step_ = s + 1;
      choose();
      ++stats_.decode_steps;
      if (options_.progress)
        std::fprintf(stderr, "infer: rank %d/%d decode step %d/%d: %zu tokens here, %.4f s (attention %.4f s)\n", ring_.rank(),
                     ring_.world_size(), s + 1, plan_.steps - 1, stepping_.size(), now() - ts, attention);
    }
    stats_.decode_seconds = now() - t1;
  }

  // What stays holds its rows only: the growth reserved for max_tokens goes back.
  void finish() {
    for (std::size_t i = 0; i < owned_.size(); ++i) owned_[i].sampler_state = samplers_[i].state();
    for (const ringattn::KVCache& cache : caches_) stats_.kv_cache_bytes += cache.bytes();
    if (!kept_) return;
    for (std::size_t i = 0; i < prompts_.size(); ++i)
      for (ringattn::KVCache& cache : caches_) {
        if (prompts_[i].keep) cache.shrink(sequence_of(i));
        else cache.erase(sequence_of(i));
      }
  }

  ringattn::Ring& ring_;
  const Model& model_;
  const ModelConfig& c_;
  const std::vector<Prompt>& prompts_;
  const JobOptions& options_;
  JobStats& stats_;
  const TokenSink& on_token_;
  const LogitsHook& shape_;
  std::vector<float> shaped_;  // a row as shape_ left it
  std::vector<ringattn::KVCache>* kept_;
  const Place at_;  // the plan's: ranks across the groups under tensor parallelism
  RingGroup tp_group_;
  TpGroup* const group_;
  const BatchPlan plan_;
  const HeadPadding pad_;
  ringattn::AttentionSpec spec_;
  PaddedCall pc_;
  std::int64_t qd_ = 0, kd_ = 0;
  std::vector<ringattn::KVCache> local_;  // the caches when none are kept
  std::vector<ringattn::KVCache>& caches_;
  bool feeds_ = false;
  DecodeRows fed_;                  // the follow-ups' tokens, in prompt order
  std::vector<std::size_t> fed_last_;  // the rows in fed_ of the follow-ups' last tokens this rank feeds, in follow-up order
  std::vector<float> h_;            // the prefill's hidden rows
  std::vector<SequenceResult> owned_;
  std::vector<float> last_h_, logits_, stops_;
  std::vector<Sampler> samplers_;
  std::vector<char> done_;
  std::vector<std::size_t> stepping_;  // the owned prompts fed this step, in order
  DecodeRows live_;                    // the tokens of the next step
  int step_ = 0;                       // the step choose() chooses for (0: the prefill's)
  double t0_ = 0;
};

}  // namespace

std::vector<SequenceResult> run_batch(ringattn::Ring& ring, const Model& model, const std::vector<Prompt>& prompts,
                                      const JobOptions& options, JobStats& stats, const TokenSink& on_token,
                                      std::vector<ringattn::KVCache>* kept, const LogitsHook& shape) {
  return BatchRun(ring, model, prompts, options, stats, on_token, kept, shape).run();
}

}  // namespace infer
