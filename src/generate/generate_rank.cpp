// ringattn generate — one rank's part (generate_rank.hpp).
#include "generate_rank.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <span>

#include "../../infer/job/batch_plan.hpp"
#include "../../infer/job/job.hpp"
#include "../../infer/job/load.hpp"
#include "../cli/peak_rss.hpp"
#include "../node/heartbeat.hpp"

namespace ringattn::generate {

RankFigures run_rank(infer::JobOptions opt, const RingOptions& ring_options, const TokenSink& sink, bool heartbeat) {
  // Inputs first: a bad file fails every rank before any of them waits on the network.
  // Tensor parallelism: the ring's groups each hold the model once, split; this rank its part.
  const std::int64_t max_batch_tokens = infer::place_in_ring(opt, ring_options);
  const infer::LoadedJob job = infer::load_job(opt, max_batch_tokens);
  Ring ring = Ring::connect(ring_options);
  std::optional<node::Heartbeat> alive;  // after the ring: it ends first
  if (heartbeat) alive.emplace(std::chrono::milliseconds(500), [&ring] { return ring.progress(); });
  infer::agree_on_job(ring, job);

  const infer::TextTokenizer* tok = job.tokenizer.get();
  struct Text {  // of each prompt this rank generates
    std::unique_ptr<infer::TextStream> stream;
    int generated = 0;
    bool ended = false;
  };
  std::map<std::int32_t, Text> texts;
  auto on_token = [&](const infer::ChosenToken& c) {
    const std::int32_t prompt = c.prompt, token = c.token;
    if (opt.tp.rank != 0) return true;  // a group's ranks choose the same tokens: its first one tells
    const infer::Prompt& p = job.prompts[static_cast<std::size_t>(prompt)];
    TokenEvent e{prompt, p.id, token, "", opt.ends_text(token), std::nullopt, static_cast<std::int64_t>(p.tokens.size())};
    auto [it, first] = texts.try_emplace(prompt);
    Text& t = it->second;
    if (first) {
      e.prompt_text = tok ? tok->text(p.tokens) : "";
      if (tok) t.stream = tok->stream(p.tokens);
    }
    // The text up to the first end token; the held-back rest with it, or with the last token.
    if (t.stream && !t.ended) {
      const bool last = ++t.generated >= infer::limit_of(job.prompts, opt, static_cast<std::size_t>(prompt));
      if (!e.ends) e.piece = t.stream->next(token);
      if (e.ends || last) e.piece += t.stream->finish();
      t.ended = e.ends || last;
    }
    sink(e);
    return true;
  };
  infer::JobStats st;
  const std::vector<infer::SequenceResult> results = infer::run_batch(ring, job.model, job.prompts, opt, st, on_token);
  ring.close();
  RankFigures f;
  f.rows = st.rows;
  f.prompt_tokens = infer::cu_seqlens(job.prompts).back();
  f.prompts = static_cast<std::int64_t>(job.prompts.size());
  f.decode_steps = st.decode_steps;
  f.prefill_seconds = st.prefill_seconds;
  f.prefill_attention_seconds = st.prefill_attention_seconds;
  f.decode_seconds = st.decode_seconds;
  f.decode_attention_seconds = st.decode_attention_seconds;
  f.decode_compute_seconds = st.decode_compute_seconds;
  f.weight_bytes = static_cast<std::int64_t>(job.model.weight_bytes());
  f.kv_cache_bytes = static_cast<std::int64_t>(st.kv_cache_bytes);
  f.peak_rss_bytes = static_cast<std::int64_t>(cli::peak_rss_kib()) * 1024;
  return f;
}

}  // namespace ringattn::generate
