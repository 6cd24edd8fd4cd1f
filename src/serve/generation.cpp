// ringattn serve — a generation request's events and the GENERATE batch (generation.hpp).
#include "generation.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ringattn/error.hpp"
#include "payload_codec.hpp"

namespace ringattn::serve {

void TokenStream::push(TokenEvent e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::optional<TokenEvent> TokenStream::next(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, wait, [&] { return !events_.empty(); })) return std::nullopt;
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

bool shapes_logits(const Generation& g) {
  return !g.logit_bias.empty() || g.presence_penalty != 0 || g.frequency_penalty != 0 || g.constraint;
}

void shape_logits(const Generation& g, std::span<float> logits) {
  for (const auto& [id, bias] : g.logit_bias) logits[static_cast<std::size_t>(id)] += bias;
  if (g.presence_penalty != 0 || g.frequency_penalty != 0)
    for (const auto& [id, n] : g.counts)
      logits[static_cast<std::size_t>(id)] -= static_cast<float>(n) * g.frequency_penalty + g.presence_penalty;
  if (g.constraint) g.constraint->mask(logits);  // last: what it forbids stays forbidden
}

namespace {

constexpr std::size_t kPromptHead = 4 + 4 + 4 + 1 + 1 + 4 + 4 + 8 + 8 + 8 + 4;  // a prompt's fields before its ids

[[noreturn]] void bad(const std::string& what) {
  throw NetworkError("rank 0's GENERATE batch: " + what, FailureCause::protocol, 0);
}

}  // namespace

GenerateBatch make_batch(const std::vector<std::shared_ptr<Generation>>& running, const std::vector<std::int32_t>& end) {
  GenerateBatch b;
  b.end = end;
  b.max_tokens = 1;
  for (const auto& g : running) {
    infer::Prompt p;
    p.id = std::to_string(b.prompts.size());
    p.tokens = g->feed;
    if (g->copy_of) {  // a sample of an earlier request of this round: its rows copied after the prefill
      const auto src = std::find_if(running.begin(), running.end(), [&](const auto& x) { return x.get() == g->copy_of; });
      if (src != running.end()) {
        p.copy_of = static_cast<std::int32_t>(src - running.begin());
        p.tokens = (*src)->feed;
      }
    }
    p.sampling = g->sampling;
    p.max_tokens = g->max_tokens - g->generated;
    p.sequence = g->sequence;
    p.keep = true;
    p.continues = g->continues;
    if (g->cut_from) b.cuts.push_back({g->sequence, *g->cut_from});
    b.max_tokens = std::max(b.max_tokens, p.max_tokens);
    b.prompts.push_back(std::move(p));
  }
  return b;
}

void check_batch(const GenerateBatch& b, std::int64_t vocab, std::int64_t context, std::int64_t max_rows,
                 const std::set<std::int32_t>& kept) {
  const std::int64_t positions = context > 0 ? context : std::int64_t{1} << 40;
  if (b.max_tokens < 1 || b.max_tokens > (context > 0 ? context : 1 << 20))
    bad("max_tokens " + std::to_string(b.max_tokens) + " is out of range");
  std::set<std::int32_t> ended;
  for (const std::int32_t id : b.end)
    if (id < 0 || !kept.count(id) || !ended.insert(id).second)
      bad("its ends name sequence " + std::to_string(id) + ", which this rank does not keep");
  std::set<std::int32_t> cut;
  for (const Cut& c : b.cuts)
    if (!kept.count(c.sequence) || ended.count(c.sequence) || !cut.insert(c.sequence).second || c.from < 0)
      bad("its cuts name sequence " + std::to_string(c.sequence) + " (from ring position " + std::to_string(c.from) +
          "), which this rank does not keep, ends or cuts twice");
  if (b.prompts.empty() && b.end.empty()) bad("neither prompts nor sequences to end");
  std::int64_t total = 0;
  std::set<std::int32_t> seen;
  for (std::size_t i = 0; i < b.prompts.size(); ++i) {
    const infer::Prompt& p = b.prompts[i];
    if (p.copy_of >= 0) {  // a sample: of an earlier prompt (not itself a sample), with its tokens, continuing nothing
      const auto c = static_cast<std::size_t>(p.copy_of);
      if (c >= i || b.prompts[c].copy_of >= 0 || p.continues || p.tokens != b.prompts[c].tokens)
        bad("prompt " + std::to_string(i) + " copies prompt " + std::to_string(p.copy_of) + ", which it may not");
    } else if (p.copy_of != -1) {
      bad("a prompt's copy_of " + std::to_string(p.copy_of) + " is neither -1 nor a prompt");
    }
    if (p.tokens.empty()) bad("a prompt has no token");
    total += static_cast<std::int64_t>(p.tokens.size());
    if (total > max_rows) bad("it holds more than " + std::to_string(max_rows) + " tokens (the ring's max_rows)");
    if (p.max_tokens < 1 || p.max_tokens > b.max_tokens) bad("a prompt's max_tokens " + std::to_string(p.max_tokens) + " is out of range");
    if (p.sequence < 0) bad("a prompt's sequence " + std::to_string(p.sequence) + " is negative");
    if (!seen.insert(p.sequence).second || ended.count(p.sequence))
      bad("sequence " + std::to_string(p.sequence) + " appears twice in the batch");
    std::int64_t history = 0;
    if (p.continues) {
      if (p.continues->ring_position < 0 || p.continues->rope_position < 0 || p.continues->rope_position > positions)
        bad("a follow-up's positions are out of range");
      history = p.continues->rope_position;
      if (!kept.count(p.sequence)) bad("a follow-up continues sequence " + std::to_string(p.sequence) + ", which this rank does not keep");
    } else if (kept.count(p.sequence)) {
      bad("a new prompt takes sequence " + std::to_string(p.sequence) + ", which this rank keeps for a session");
    }
    if (context > 0 && history + static_cast<std::int64_t>(p.tokens.size()) + p.max_tokens > context)
      bad("a prompt, its history and max_tokens exceed the model's context of " + std::to_string(context));
    for (const std::int32_t t : p.tokens)
      if (t < 0 || t >= vocab) bad("token id " + std::to_string(t) + " is outside the model's vocabulary of " + std::to_string(vocab));
    const infer::Sampling& s = *p.sampling;
    if (!(s.temperature >= 0 && s.temperature <= 100) || !(s.top_p >= 0 && s.top_p <= 1))
      bad("a prompt's temperature or top_p is out of range");
  }
}

std::vector<std::byte> encode_generate(const GenerateBatch& b) {
  peer::Writer w;
  w.u32(static_cast<std::uint32_t>(b.max_tokens));
  w.u32(static_cast<std::uint32_t>(b.end.size()));
  for (const std::int32_t id : b.end) w.i32(id);
  w.u32(static_cast<std::uint32_t>(b.cuts.size()));
  for (const Cut& c : b.cuts) {
    w.i32(c.sequence);
    w.i64(c.from);
  }
  w.u32(static_cast<std::uint32_t>(b.prompts.size()));
  for (const infer::Prompt& p : b.prompts) {
    const infer::Sampling s = p.sampling.value_or(infer::Sampling{});
    w.u32(static_cast<std::uint32_t>(p.tokens.size()));
    w.i32(p.sequence);
    w.u32(static_cast<std::uint32_t>(p.max_tokens));
    w.u8(p.keep ? 1 : 0);
    w.u8(p.continues ? 1 : 0);
    w.f32(s.temperature);
    w.f32(s.top_p);
    w.u64(s.seed);
    w.i64(p.continues ? p.continues->ring_position : 0);
    w.i64(p.continues ? p.continues->rope_position : 0);
    w.i32(p.copy_of);
    for (const std::int32_t t : p.tokens) w.i32(t);
  }
  return std::move(w.out);
}

GenerateBatch decode_generate(std::span<const std::byte> payload, std::int64_t vocab, std::int64_t context,
                              std::int64_t max_rows, const std::set<std::int32_t>& kept) {
  peer::Reader r{payload, "rank 0's GENERATE message", 0};
  GenerateBatch b;
  b.max_tokens = static_cast<int>(std::min<std::uint32_t>(r.u32(), 1u << 30));
  const std::uint32_t ends = r.u32();
  if (ends > r.left() / 4) r.bad("counts " + std::to_string(ends) + " sequences to end in " + std::to_string(r.left()) + " bytes");
  for (std::uint32_t i = 0; i < ends; ++i) b.end.push_back(r.i32());
  const std::uint32_t cuts = r.u32();
  if (cuts > r.left() / 12) r.bad("counts " + std::to_string(cuts) + " sequences to cut in " + std::to_string(r.left()) + " bytes");
  for (std::uint32_t i = 0; i < cuts; ++i) {
    Cut c;
    c.sequence = r.i32();
    c.from = r.i64();
    b.cuts.push_back(c);
  }
  const std::uint32_t prompts = r.u32();
  if (prompts > r.left() / kPromptHead) r.bad("counts " + std::to_string(prompts) + " prompts in " + std::to_string(r.left()) + " bytes");
  for (std::uint32_t i = 0; i < prompts; ++i) {
    infer::Prompt p;
    p.id = std::to_string(i);
    const std::uint32_t tokens = r.u32();
    p.sequence = r.i32();
    p.max_tokens = static_cast<int>(std::min<std::uint32_t>(r.u32(), 1u << 30));
    const std::uint8_t keep = r.u8(), continues = r.u8();
    if (keep > 1 || continues > 1) r.bad("has a flag byte that is neither 0 nor 1");
    p.keep = keep == 1;
    infer::Sampling s;
    s.temperature = r.f32();
    s.top_p = r.f32();
    s.seed = r.u64();
    p.sampling = s;
    const std::int64_t ring_position = r.i64(), rope_position = r.i64();
    if (continues) p.continues = infer::Continuation{ring_position, rope_position};
    p.copy_of = r.i32();
    if (tokens > r.left() / 4) r.bad("counts " + std::to_string(tokens) + " tokens in " + std::to_string(r.left()) + " bytes");
    p.tokens.resize(tokens);
    for (std::int32_t& t : p.tokens) t = r.i32();
    b.prompts.push_back(std::move(p));
  }
  r.end();
  check_batch(b, vocab, context, max_rows, kept);
  return b;
}

std::vector<std::byte> encode_erasures(const std::vector<std::int32_t>& sequences) {
  peer::Writer w;
  w.u32(static_cast<std::uint32_t>(sequences.size()));
  for (const std::int32_t id : sequences) w.i32(id);
  return std::move(w.out);
}

std::vector<std::int32_t> decode_erasures(std::span<const std::byte> payload, const std::set<std::int32_t>& kept) {
  peer::Reader r{payload, "rank 0's DONE of a generation round", 0};
  const std::uint32_t n = r.u32();
  if (n > r.left() / 4) r.bad("counts " + std::to_string(n) + " sequences to erase in " + std::to_string(r.left()) + " bytes");
  std::vector<std::int32_t> out;
  std::set<std::int32_t> seen;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::int32_t id = r.i32();
    if (!kept.count(id) || !seen.insert(id).second) r.bad("names sequence " + std::to_string(id) + " to erase, which this rank does not keep (or twice)");
    out.push_back(id);
  }
  r.end();
  return out;
}

}  // namespace ringattn::serve
