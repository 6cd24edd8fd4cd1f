// RingService's generation jobs on a hosted model: rank 0 packs every queued request into
// one batch and sends it to the workers (JOB, GENERATE); every rank runs infer::run_batch
// on it — the prompts prefilled through Ring::forward, decoded on the stationary KV shards
// through Ring::decode — with every prompt decoded on rank 0, which streams each token to
// its request the moment it is chosen. Then DONE, as for an attention job. The rows of a
// session's requests stay in every rank's kept caches for its next message (sessions.hpp).
#include <algorithm>

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
    record_sessions();
    generations_.push_back(std::move(g));
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

void RingService::finish_generations(std::vector<std::shared_ptr<Generation>>& batch,
                                     const std::vector<infer::SequenceResult>& results) {
  std::vector<const infer::SequenceResult*> by_prompt(batch.size(), nullptr);
  for (const auto& r : results) by_prompt[static_cast<std::size_t>(r.prompt)] = &r;
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < batch.size(); ++i) sessions_->finish(*batch[i], by_prompt[i], batch[i]->complete && by_prompt[i]);
  record_sessions();
}

void RingService::record_sessions() {
  metrics_.set("ringattn_sessions", {}, static_cast<double>(sessions_->size()));
  metrics_.set("ringattn_cache_rows_reserved", {}, static_cast<double>(sessions_->reserved()));
  if (const std::uint64_t e = sessions_->evicted(); e > evicted_recorded_) {
    metrics_.add("ringattn_sessions_evicted_total", {}, static_cast<double>(e - evicted_recorded_));
    evicted_recorded_ = e;
  }
}

std::vector<infer::SequenceResult> RingService::run_kept_batch(const GenerateBatch& b, infer::JobStats& st, const infer::TokenSink& sink) {
  for (const std::int32_t e : b.end) kept_.erase(e);
  std::vector<infer::SequenceResult> results;
  if (!b.prompts.empty())
    results = infer::run_batch(*ring_, model_->job.model, b.prompts, batch_options(*model_, b.max_tokens), st, sink, &kept_.caches);
  for (const infer::Prompt& p : b.prompts)
    if (p.keep) kept_.ids.insert(p.sequence);
  metrics_.set("ringattn_generation_cache_rows", {}, static_cast<double>(kept_.rows()));  // the sessions' rows here
  return results;
}

std::vector<std::shared_ptr<Generation>> RingService::take_generations() {
  // One rank may hold every row of a batch (short prompts go whole to one rank), and one
  // decode call carries every prompt's token: both within max_rows.
  const std::int64_t cap = limits().max_rows;
  std::vector<std::shared_ptr<Generation>> batch;
  std::int64_t tokens = 0;
  while (!generations_.empty()) {
    std::shared_ptr<Generation> g = generations_.front();
    const auto n = static_cast<std::int64_t>(g->prompt.size());
    if (!batch.empty() && (tokens + n > cap || static_cast<std::int64_t>(batch.size()) >= cap)) break;
    generations_.pop_front();
    if (g->cancelled) {  // its client left while it waited
      g->ended = true;
      metrics_.add("ringattn_generations_total", {{"result", "cancelled"}});
      sessions_->finish(*g, nullptr, false);
      continue;
    }
    tokens += n;
    batch.push_back(std::move(g));
  }
  metrics_.set("ringattn_generations_queued", {}, static_cast<double>(generations_.size()));
  return batch;
}

void RingService::run_generation(std::vector<std::shared_ptr<Generation>>& batch, const std::vector<std::int32_t>& end) {
  if (batch.empty() && end.empty()) return;
  const HostedModel& m = *model_;
  // Each request was checked where it entered (parse_request: its tokens, the context, the
  // ring's rows; SessionTable::admit: a session's history, the cache) and take_generations
  // kept the batch within max_rows; the workers check the frame as it arrives
  // (decode_generate). Rank 0 runs what it sends without checking it a third time.
  const GenerateBatch b = make_batch(batch, end);
  const std::vector<std::byte> payload = encode_generate(b);
  const std::uint64_t id = next_job_id();
  const std::span<const std::byte> bytes(payload);
  std::vector<MessageRequest> sends;
  for (int r = 1; r < world(); ++r) {
    sends.push_back(ring_->send_message(r, static_cast<std::uint32_t>(peer::Msg::job), id, kGeneration));
    sends.push_back(ring_->send_message(r, static_cast<std::uint32_t>(peer::Msg::generate), id, bytes));
  }
  for (auto& s : sends) ring_->wait(s);

  const infer::TextTokenizer& tok = *m.job.tokenizer;
  std::vector<std::unique_ptr<infer::TextStream>> text(batch.size());
  std::vector<Clock::time_point> last(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) text[i] = tok.stream(batch[i]->prompt);
  std::int64_t generated = 0;
  auto sink = [&](std::int32_t prompt, std::int32_t token) {
    const auto i = static_cast<std::size_t>(prompt);
    Generation& g = *batch[i];
    if (g.ended) return false;
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
    else metrics_.observe("ringattn_inter_token_seconds", {}, std::chrono::duration<double>(now - last[i]).count());
    last[i] = now;
    if (m.options.ends_text(token)) {
      g.ended = g.complete = g.end_token = true;
      g.stream.push(done_event("stop", text[i]->finish()));
      metrics_.add("ringattn_generations_total", {{"result", "ok"}});
      return false;
    }
    ++g.generated;
    ++generated;
    g.stream.push(token_event(token, text[i]->next(token)));
    if (g.generated >= g.max_tokens) {
      g.ended = g.complete = true;
      g.stream.push(done_event("length", text[i]->finish()));
      metrics_.add("ringattn_generations_total", {{"result", "ok"}});
      return false;
    }
    return true;
  };
  infer::JobStats st;
  const auto t0 = Clock::now();
  const std::vector<infer::SequenceResult> results = run_kept_batch(b, st, sink);
  for (auto& g : batch)
    if (!g->ended) {  // cannot happen (every request is served up to its max_tokens); never leave one waiting
      g->ended = true;
      g->stream.push(error_event("the ring ended this request before its last token", 500));
    }
  finish_generations(batch, results);
  std::vector<MessageRequest> dones;
  try {
    for (int r = 1; r < world(); ++r) dones.push_back(ring_->send_message(r, static_cast<std::uint32_t>(peer::Msg::done), id, {}));
    for (auto& d : dones) ring_->wait(d);
  } catch (const NetworkError& e) {
    cli::logger("serve")->info("generation {}: every token is out; the ring ended after it: {}", id, e.what());
  }
  std::int64_t prompt_tokens = 0;
  for (const auto& p : b.prompts) prompt_tokens += static_cast<std::int64_t>(p.tokens.size());
  metrics_.add("ringattn_generated_tokens_total", {{"phase", "prefill"}},
               static_cast<double>(st.rows + st.continued_tokens));  // this rank's rows, as on the workers
  metrics_.add("ringattn_generated_tokens_total", {{"phase", "decode"}}, static_cast<double>(generated));
  if (st.prefill_seconds > 0) metrics_.set("ringattn_prefill_tokens_per_second", {}, static_cast<double>(prompt_tokens) / st.prefill_seconds);
  std::int64_t decoded = 0;  // chosen in decode steps (the first of each came from the prefill)
  for (const auto& r : results) decoded += std::max<std::int64_t>(0, static_cast<std::int64_t>(r.tokens.size()) - 1);
  if (st.decode_seconds > 0 && decoded > 0)
    metrics_.set("ringattn_decode_tokens_per_second", {}, static_cast<double>(decoded) / st.decode_seconds);
  record_job(id, JobResult::ok, since(t0),
             std::to_string(batch.size()) + " generations, " + std::to_string(prompt_tokens) + " prompt tokens, " +
                 std::to_string(b.end.size()) + " sessions ended",
             "", FailureCause::unknown);
  cli::logger("serve")->info("generation {}: {} requests, {} prompt tokens ({} continuing sessions), {} steps, {} sessions ended in {:.3f} s",
                             id, batch.size(), prompt_tokens, st.continued_tokens, st.decode_steps + (batch.empty() ? 0 : 1),
                             b.end.size(), since(t0));
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
  peer::receive_into(*ring_, 0, peer::Msg::done, id, {});
  metrics_.add("ringattn_generated_tokens_total", {{"phase", "prefill"}}, static_cast<double>(st.rows));
  record_job(id, JobResult::ok, since(t0), std::to_string(b.prompts.size()) + " generations, " + std::to_string(st.rows) + " rows here", "",
             FailureCause::unknown);
  {
    std::lock_guard lock(mu_);
    running_id_ = 0;
    record_transport();
  }
  set_state(stopping_ ? RingState::draining : RingState::ready);
}

}  // namespace ringattn::serve
