// RingService's generation jobs on a hosted model: rank 0 packs every queued request into
// one batch and sends it to the workers (JOB, GENERATE); every rank runs infer::run_batch
// on it — the prompts prefilled through Ring::forward, decoded on the stationary KV shards
// through Ring::decode — with every prompt decoded on rank 0, which streams each token to
// its request the moment it is chosen. Then DONE, as for an attention job. The rows of a
// session's requests stay in every rank's kept caches for its next message (sessions.hpp).
#include <algorithm>
#include <utility>

#include "ringattn/error.hpp"
#include "../../infer/job/agreement.hpp"
#include "../../infer/job/job.hpp"
#include "../cli/log.hpp"
#include "peer_messages.hpp"
#include "ring_service.hpp"
#include "service_events.hpp"
#include "sessions.hpp"

namespace ringattn::serve {

namespace {

void push(Generation& g, TokenEvent e) {  // to its request's stream, as its choice's
  e.index = g.index;
  g.stream->push(std::move(e));
}

constexpr std::byte kGeneration[1] = {static_cast<std::byte>(peer::JobKind::generation)};

// The options every rank runs a batch with: the model's, every prompt decoded on rank 0.
infer::JobOptions batch_options(const HostedModel& m, int steps) {
  infer::JobOptions o = m.options;
  o.tokens = steps;
  o.decode_rank = 0;
  o.stop_at_end = true;  // an ended (or abandoned) reply stops being fed at once
  o.progress = false;
  o.layout.reset();
  return o;
}

}  // namespace

void RingService::agree_on_model() {
  if (world() == 1) return;
  // (--tp is the same on every daemon: the ring's group size is.)
  if (!model_) infer::agree_on_model(*ring_, 0, "no model");
  else infer::agree_on_parts(*ring_, model_->job.whole_digest(), model_->digest, model_->job.description, model_->options.tp.size);
}

void RingService::submit_generation(std::shared_ptr<Generation> g, bool open_session, const std::string& session) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw Refusal(503, "rank 0 is shutting down and takes no more requests; send it again once it is back");
    sessions_->admit(*g, open_session, session);
    for (std::size_t i = 0; i < g->samples.size(); ++i) {  // each sample its own rows (copied from g's)
      try {
        sessions_->admit(*g->samples[i], false, "", false);
      } catch (const Refusal&) {
        for (std::size_t j = 0; j < i; ++j) sessions_->finish(*g->samples[j], nullptr, false);
        sessions_->finish(*g, nullptr, false);
        throw;
      }
    }
    record_sessions();
    generations_.push_back(std::move(g));
    arrived_ = true;  // the running replies pause at their next step to let it join
    metrics_.set("ringattn_generations_queued", {}, static_cast<double>(generations_.size()));
  }
  cv_.notify_all();
}

void RingService::close_session(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    sessions_->close(id);
    record_sessions();
  }
  cv_.notify_all();  // its rows go with the next job, sent now
}

void RingService::record_sessions() {
  metrics_.set("ringattn_sessions", {}, static_cast<double>(sessions_->size()));
  metrics_.set("ringattn_cache_rows_reserved", {}, static_cast<double>(sessions_->reserved()));
  if (const std::uint64_t e = sessions_->evicted(); e > evicted_recorded_) {
    metrics_.add("ringattn_sessions_evicted_total", {}, static_cast<double>(e - evicted_recorded_));
    evicted_recorded_ = e;
  }
  const SessionTable::CacheFigures f = sessions_->cache_figures();
  metrics_.set("ringattn_prefix_cache_entries", {}, static_cast<double>(f.entries));
  metrics_.set("ringattn_prefix_cache_rows", {}, static_cast<double>(f.rows));
  const auto count = [&](const char* name, std::uint64_t now, std::uint64_t& seen) {
    if (now > seen) metrics_.add(name, {}, static_cast<double>(now - seen));
    seen = now;
  };
  count("ringattn_prefix_cache_lookups_total", f.lookups, cache_recorded_.lookups);
  count("ringattn_prefix_cache_hits_total", f.hits, cache_recorded_.hits);
  count("ringattn_prefix_cache_cached_tokens_total", f.cached_tokens, cache_recorded_.cached_tokens);
  count("ringattn_prefix_cache_evictions_total", f.evicted, cache_recorded_.evicted);
}

std::vector<infer::SequenceResult> RingService::run_kept_batch(const GenerateBatch& b, infer::JobStats& st, const infer::TokenSink& sink,
                                                              const infer::LogitsHook& shape) {
  for (const std::int32_t e : b.end) kept_.erase(e);
  for (const Cut& c : b.cuts)  // this rank's rows of the sequence before the ring position stay
    for (KVCache& cache : kept_.caches) {
      const std::span<const std::int64_t> at = cache.view(c.sequence).positions;
      cache.truncate(c.sequence, std::lower_bound(at.begin(), at.end(), c.from) - at.begin());
    }
  std::vector<infer::SequenceResult> results;
  if (!b.prompts.empty())
    results = infer::run_batch(*ring_, model_->job.model, b.prompts, batch_options(*model_, b.max_tokens), st, sink, &kept_.caches, shape);
  for (const infer::Prompt& p : b.prompts)
    if (p.keep) kept_.ids.insert(p.sequence);
  metrics_.set("ringattn_generation_cache_rows", {}, static_cast<double>(kept_.rows()));  // the sessions' rows here
  return results;
}

std::vector<std::shared_ptr<Generation>> RingService::take_generations(std::size_t running, std::int64_t prefilling) {
  // Newcomers join the running replies. One rank may hold every row of a round (short
  // prompts go whole to one rank), and one decode call carries a token of each prompt: both
  // within max_rows. A newcomer that does not fit beside the running ones waits for rows to
  // free; with none running the first always goes (parse_request bounded it by max_rows).
  const std::int64_t cap = limits().max_rows;
  auto count = static_cast<std::int64_t>(running);
  std::int64_t tokens = count;  // a running reply feeds one token (its last)
  // While replies stream, the round's prompt tokens — a chunked prompt's next chunk first,
  // then the newcomers in arrival order — are at most prefill_chunk (a long prompt goes in
  // chunks, one a round; a round pauses at every step while one is in): no step of theirs
  // waits for more than one chunk's prefill, however many arrive at once.
  const std::int64_t chunk = config_.prefill_chunk;
  std::int64_t budget = chunk - prefilling;
  std::vector<std::shared_ptr<Generation>> joined;
  arrived_ = false;
  while (!generations_.empty()) {
    std::shared_ptr<Generation> g = generations_.front();
    if (sessions_) sessions_->look_again(*g);  // an entry filed since it arrived (its round ended) may hold its prefix
    const bool limited = count > 0 && chunk > 0;
    if (limited && budget <= 0) {  // the round's chunk is spent: the next round takes it (each round pauses for it)
      arrived_ = true;
      break;
    }
    const bool chunked = limited && static_cast<std::int64_t>(g->feed.size()) > budget;
    const auto n = chunked ? budget : static_cast<std::int64_t>(g->feed.size());
    const auto k = chunked ? 0 : static_cast<std::int64_t>(g->samples.size());
    if (count > 0 && (tokens + n + k > cap || count + k >= cap)) break;
    generations_.pop_front();
    if (g->cancelled) {  // its client left while it waited
      g->ended = true;
      metrics_.add("ringattn_generations_total", {{"result", "cancelled"}});
      settle(*g, nullptr);
      continue;
    }
    tokens += n + k;  // a sample: one row a step, no prefill
    if (limited) budget -= n;
    count += 1 + k;
    if (chunked) {  // its samples join the round of its last chunk (they copy its whole rows)
      g->rest.assign(g->feed.begin() + n, g->feed.end());
      g->feed.resize(static_cast<std::size_t>(n));
      joined.push_back(std::move(g));
      continue;
    }
    std::vector<std::shared_ptr<Generation>> samples = std::move(g->samples);
    joined.push_back(std::move(g));
    for (auto& s : samples) joined.push_back(std::move(s));  // after their request: they copy its rows
  }
  metrics_.set("ringattn_generations_queued", {}, static_cast<double>(generations_.size()));
  return joined;
}

void RingService::settle(Generation& g, const infer::SequenceResult* r) {
  // A session's rows are the table's to keep or end; a whole reply's become a prefix-cache entry.
  const bool kept = sessions_->finish(g, r, g.complete && r);
  if (g.ran && g.session.empty() && !kept) to_erase_.push_back(g.sequence);
}

void RingService::settle_paused() {
  std::vector<std::shared_ptr<Generation>> still;
  for (auto& g : active_) {
    if (g->stopped) {  // its text reached a stop sequence while it paused: a whole reply (never a session's)
      g->ended = g->complete = true;
      metrics_.add("ringattn_generations_total", {{"result", "ok"}});
    } else if (g->cancelled) {
      g->ended = true;
      metrics_.add("ringattn_generations_total", {{"result", "cancelled"}});
    }
    if (g->ended) settle(*g, nullptr);
    else still.push_back(std::move(g));
  }
  active_ = std::move(still);
}

bool RingService::on_chosen(Generation& g, const infer::ChosenToken& c) {
  if (c.step != round_step_) {  // the first token of a step: pause the round if newcomers wait (or a chunk does)
    round_step_ = c.step;
    pause_ = arrived_.load() || chunking_;
  }
  if (g.ended) return false;
  if (!g.rest.empty()) {  // a chunk of its prompt went in: its token is not one (the next chunk is)
    pause_ = true;
    return false;
  }
  g.chosen.push_back(c.token);
  ++g.counts[c.token];
  if (g.constraint) g.constraint->advance(c.token);  // before the text: it writes the grammar's bytes
  if (g.stopped) {  // its text reached a stop sequence (openai_api.cpp): complete, not cancelled
    g.ended = g.complete = true;
    metrics_.add("ringattn_generations_total", {{"result", "ok"}});
    return false;
  }
  if (g.cancelled) {
    g.ended = true;
    metrics_.add("ringattn_generations_total", {{"result", "cancelled"}});
    return false;
  }
  const auto now = Clock::now();
  if (g.generated == 0) metrics_.observe("ringattn_time_to_first_token_seconds", {}, std::chrono::duration<double>(now - g.queued_at).count());
  else metrics_.observe("ringattn_inter_token_seconds", {}, std::chrono::duration<double>(now - g.last_token_at).count());
  g.last_token_at = now;
  if (model_->options.ends_text(c.token)) {
    g.ended = g.complete = g.end_token = true;
    push(g, done_event("stop", g.text->finish()));
    metrics_.add("ringattn_generations_total", {{"result", "ok"}});
    return false;
  }
  ++g.generated;
  ++round_generated_;
  TokenEvent e = token_event(c.token, g.text->next(c.token));
  if (g.top_logprobs >= 0) e.logprobs = infer::logprobs_of(c.logits, c.token, g.top_logprobs);
  push(g, std::move(e));
  if (g.generated >= g.max_tokens) {
    g.ended = g.complete = true;
    push(g, done_event("length", g.text->finish()));
    metrics_.add("ringattn_generations_total", {{"result", "ok"}});
    return false;
  }
  return !pause_;  // paused: it goes on in the next round from the token just chosen
}

void RingService::after_round(std::vector<std::shared_ptr<Generation>>& round, const std::vector<infer::SequenceResult>& results) {
  std::vector<const infer::SequenceResult*> by_prompt(round.size(), nullptr);
  for (const auto& r : results) by_prompt[static_cast<std::size_t>(r.prompt)] = &r;
  std::lock_guard lock(mu_);
  active_.clear();
  // The prompts still in chunks share the next round's chunk (take_generations' bound).
  const auto chunking = std::count_if(round.begin(), round.end(), [](const auto& g) { return !g->ended && !g->rest.empty(); });
  const std::size_t share = chunking == 0 ? 0 : std::max<std::size_t>(1, static_cast<std::size_t>(config_.prefill_chunk) / static_cast<std::size_t>(chunking));
  for (std::size_t i = 0; i < round.size(); ++i) {
    Generation& g = *round[i];
    const infer::SequenceResult* r = by_prompt[i];
    g.ran = true;         // the round kept its rows on every rank
    g.cut_from.reset();   // a cached prefix is cut once, in its first round
    g.copy_of = nullptr;  // a sample copies its request's rows once, in its first round
    if (!g.ended && (!r || r->tokens.empty())) {  // cannot happen (a round chooses a token of each); never leave one waiting
      g.ended = true;
      push(g, error_event("the ring ended this request before its last token", 500));
    }
    if (g.ended) {
      settle(g, r);
      continue;
    }
    g.continues = r->next;
    if (!g.rest.empty()) {  // its prompt's next chunk (the token chosen from this one is no reply's: its coin unspent)
      const std::size_t take = std::min(g.rest.size(), share);
      g.feed.assign(g.rest.begin(), g.rest.begin() + static_cast<std::ptrdiff_t>(take));
      g.rest.erase(g.rest.begin(), g.rest.begin() + static_cast<std::ptrdiff_t>(take));
      active_.push_back(round[i]);
      continue;
    }
    g.feed = {r->tokens.back()};  // chosen, not fed
    g.sampling.seed = r->sampler_state;
    active_.push_back(round[i]);
  }
  record_sessions();
}

void RingService::run_generation(std::vector<std::shared_ptr<Generation>>& round, const std::vector<std::int32_t>& end) {
  if (round.empty() && end.empty()) return;
  // Each request was checked where it entered (parse_request: its tokens, the context, the
  // ring's rows; SessionTable::admit: a session's history, the cache) and take_generations
  // kept the round within max_rows; the workers check the frame as it arrives
  // (decode_generate). Rank 0 runs what it sends without checking it a third time.
  const GenerateBatch b = make_batch(round, end);
  const std::vector<std::byte> payload = encode_generate(b);
  const std::uint64_t id = next_job_id();
  const std::span<const std::byte> bytes(payload);
  std::vector<MessageRequest> sends;
  for (int r = 1; r < world(); ++r) {
    sends.push_back(ring_->send_message(r, static_cast<std::uint32_t>(peer::Msg::job), id, kGeneration));
    sends.push_back(ring_->send_message(r, static_cast<std::uint32_t>(peer::Msg::generate), id, bytes));
  }
  for (auto& s : sends) ring_->wait(s);

  for (auto& g : round)
    if (!g->text) g->text = g->constraint ? g->constraint->text() : model_->job.tokenizer->stream(g->prompt);
  round_step_ = -1;
  pause_ = false;
  chunking_ = std::any_of(round.begin(), round.end(), [](const auto& g) { return !g->rest.empty(); });
  round_generated_ = 0;
  infer::JobStats st;
  const auto t0 = Clock::now();
  infer::LogitsHook shape;  // only when a reply asks: a hook copies every row
  if (std::any_of(round.begin(), round.end(), [](const auto& g) { return shapes_logits(*g); }))
    shape = [&](std::int32_t prompt, std::span<float> logits) { shape_logits(*round[static_cast<std::size_t>(prompt)], logits); };
  const std::vector<infer::SequenceResult> results =
      run_kept_batch(b, st, [&](const infer::ChosenToken& c) { return on_chosen(*round[static_cast<std::size_t>(c.prompt)], c); }, shape);
  after_round(round, results);
  // The rows of the replies that ended go now, on every rank (the DONE says which).
  std::vector<std::int32_t> gone;
  {
    std::lock_guard lock(mu_);
    gone = std::exchange(to_erase_, {});
    for (const std::int32_t s : sessions_->take_ended()) gone.push_back(s);
  }
  for (const std::int32_t s : gone) kept_.erase(s);
  metrics_.set("ringattn_generation_cache_rows", {}, static_cast<double>(kept_.rows()));
  const std::vector<std::byte> erasures = encode_erasures(gone);
  std::vector<MessageRequest> dones;
  try {
    for (int r = 1; r < world(); ++r) dones.push_back(ring_->send_message(r, static_cast<std::uint32_t>(peer::Msg::done), id, erasures));
    for (auto& d : dones) ring_->wait(d);
  } catch (const NetworkError& e) {
    cli::logger("serve")->info("generation round {}: every token is out; the ring ended after it: {}", id, e.what());
  }
  record_round(id, b, st, results, since(t0));
}

void RingService::record_round(std::uint64_t id, const GenerateBatch& b, const infer::JobStats& st,
                               const std::vector<infer::SequenceResult>& results, double seconds) {
  std::int64_t fed = 0;
  for (const auto& p : b.prompts) fed += static_cast<std::int64_t>(p.tokens.size());
  metrics_.add("ringattn_generated_tokens_total", {{"phase", "prefill"}},
               static_cast<double>(st.rows + st.continued_tokens));  // this rank's rows, as on the workers
  metrics_.add("ringattn_generated_tokens_total", {{"phase", "decode"}}, static_cast<double>(round_generated_));
  if (st.prefill_seconds > 0) metrics_.set("ringattn_prefill_tokens_per_second", {}, static_cast<double>(fed) / st.prefill_seconds);
  std::int64_t decoded = 0;  // chosen in decode steps (the first of each came from the prefill)
  for (const auto& r : results) decoded += std::max<std::int64_t>(0, static_cast<std::int64_t>(r.tokens.size()) - 1);
  if (st.decode_seconds > 0 && decoded > 0)
    metrics_.set("ringattn_decode_tokens_per_second", {}, static_cast<double>(decoded) / st.decode_seconds);
  record_job(id, JobResult::ok, seconds,
             std::to_string(b.prompts.size()) + " generations, " + std::to_string(fed) + " tokens fed, " +
                 std::to_string(b.end.size()) + " sequences ended",
             "", FailureCause::unknown);
  const auto going_on = std::count_if(b.prompts.begin(), b.prompts.end(), [](const infer::Prompt& p) { return p.continues.has_value(); });
  cli::logger("serve")->info("generation round {}: {} requests ({} going on), {} tokens fed, {} steps, {} sequences ended in {:.3f} s", id,
                             b.prompts.size(), going_on, fed, st.decode_steps + (b.prompts.empty() ? 0 : 1), b.end.size(), seconds);
}

void RingService::run_worker_generation(std::uint64_t id) {
  std::vector<std::byte> buf;
  peer::receive(*ring_, 0, peer::Msg::generate, id, buf);
  if (!model_)  // the ring agreed on the model when it formed: rank 0 has none either
    throw NetworkError("rank 0 sent generation " + std::to_string(id) + " but this daemon hosts no model", FailureCause::protocol, 0);
  const HostedModel& m = *model_;
  const GenerateBatch b = decode_generate(buf, m.options.model.vocab, m.options.model.context, limits().max_rows, kept_.ids);
  {
    std::lock_guard lock(mu_);
    running_id_ = id;
  }
  set_state(RingState::running);
  const auto t0 = Clock::now();
  infer::JobStats st;
  run_kept_batch(b, st, {});
  peer::receive(*ring_, 0, peer::Msg::done, id, buf);
  for (const std::int32_t s : decode_erasures(buf, kept_.ids)) kept_.erase(s);
  metrics_.set("ringattn_generation_cache_rows", {}, static_cast<double>(kept_.rows()));
  // Its prefill rows and its share of the follow-ups' tokens (dealt over the ranks).
  metrics_.add("ringattn_generated_tokens_total", {{"phase", "prefill"}}, static_cast<double>(st.rows + st.continued_tokens));
  record_job(id, JobResult::ok, since(t0),
             std::to_string(b.prompts.size()) + " generations, " + std::to_string(st.rows + st.continued_tokens) + " rows here", "",
             FailureCause::unknown);
  {
    std::lock_guard lock(mu_);
    running_id_ = 0;
    record_transport();
  }
  set_state(stopping_ ? RingState::draining : RingState::ready);
}

}  // namespace ringattn::serve
