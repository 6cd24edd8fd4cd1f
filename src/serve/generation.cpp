// ringattn serve — a generation request's events and the GENERATE batch (generation.hpp).
#include "src/serve/generation.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ringattn/error.hpp"
#include "src/cli/json_object.hpp"
#include "src/cli/json_value.hpp"

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

std::string encode_batch(const std::vector<std::shared_ptr<Generation>>& batch, const std::vector<std::int32_t>& end) {
  std::vector<cli::JsonObject> prompts;
  int max_tokens = 1;
  for (const auto& g : batch) {
    std::vector<std::int64_t> ids(g->prompt.begin(), g->prompt.end());
    cli::JsonObject p;
    p.add("tokens", ids)
        .add("temperature", static_cast<double>(g->sampling.temperature))
        .add("top_p", static_cast<double>(g->sampling.top_p))
        .add("seed", static_cast<std::uint64_t>(g->sampling.seed))
        .add("max_tokens", g->max_tokens)
        .add("sequence", static_cast<std::int64_t>(g->sequence))
        .add("keep", g->keep);
    if (g->continues) p.add("from", std::vector<std::int64_t>{g->continues->ring_position, g->continues->rope_position});
    prompts.push_back(std::move(p));
    max_tokens = std::max(max_tokens, g->max_tokens);
  }
  return cli::JsonObject()
      .add("max_tokens", max_tokens)
      .add("end", std::vector<std::int64_t>(end.begin(), end.end()))
      .add("prompts", prompts)
      .str();
}

DecodedBatch decode_batch(const std::string& payload, std::int64_t vocab, std::int64_t context, std::int64_t max_tokens_total,
                          const std::set<std::int32_t>& kept) {
  auto bad = [](const std::string& what) {
    return NetworkError("rank 0's GENERATE message: " + what, FailureCause::protocol, 0);
  };
  cli::JsonValue j;
  try {
    j = cli::parse_json(payload);
  } catch (const std::exception& e) {
    throw bad(std::string("not JSON: ") + e.what());
  }
  auto number = [&](const cli::JsonValue& o, const char* key, double lo, double hi) {
    const cli::JsonValue* v = o.get(key);
    if (!v || v->kind != cli::JsonValue::Kind::number || !(v->number >= lo && v->number <= hi))
      throw bad(std::string("\"") + key + "\" missing or out of range");
    return v->number;
  };
  auto whole = [&](const cli::JsonValue& v, double lo, double hi, const char* what) {
    if (v.kind != cli::JsonValue::Kind::number || !(v.number >= lo && v.number <= hi) || v.number != std::floor(v.number))
      throw bad(std::string(what) + " is not an integer in range");
    return static_cast<std::int64_t>(v.number);
  };
  auto array = [&](const cli::JsonValue& o, const char* key) -> const std::vector<cli::JsonValue>& {
    const cli::JsonValue* v = o.get(key);
    if (!v || v->kind != cli::JsonValue::Kind::array) throw bad(std::string("\"") + key + "\" must be an array");
    return v->items;
  };
  const double id_max = 2147483647.0;
  const double positions = static_cast<double>(context > 0 ? context : std::int64_t{1} << 40);
  DecodedBatch b;
  b.max_tokens = static_cast<int>(number(j, "max_tokens", 1, static_cast<double>(context > 0 ? context : 1 << 20)));
  std::set<std::int32_t> ended;
  for (const cli::JsonValue& e : array(j, "end")) {
    const auto id = static_cast<std::int32_t>(whole(e, 0, id_max, "an \"end\" id"));
    if (!kept.count(id) || !ended.insert(id).second) throw bad("\"end\" names sequence " + std::to_string(id) + ", which this rank does not keep");
  }
  b.end.assign(ended.begin(), ended.end());
  const std::vector<cli::JsonValue>& prompts = array(j, "prompts");
  if (prompts.empty() && b.end.empty()) throw bad("neither prompts nor sequences to end");
  std::int64_t total = 0;
  std::set<std::int32_t> seen;
  for (const cli::JsonValue& p : prompts) {
    const std::vector<cli::JsonValue>& tokens = array(p, "tokens");
    if (tokens.empty()) throw bad("a prompt's \"tokens\" is empty");
    total += static_cast<std::int64_t>(tokens.size());
    if (total > max_tokens_total) throw bad("the batch holds more than " + std::to_string(max_tokens_total) + " tokens");
    infer::Prompt q;
    q.id = std::to_string(b.prompts.size());
    q.max_tokens = static_cast<int>(number(p, "max_tokens", 1, b.max_tokens));
    q.sequence = static_cast<std::int32_t>(whole(p.get("sequence") ? *p.get("sequence") : cli::JsonValue{}, 0, id_max, "a prompt's \"sequence\""));
    const cli::JsonValue* keep = p.get("keep");
    if (!keep || keep->kind != cli::JsonValue::Kind::boolean) throw bad("a prompt's \"keep\" must be true or false");
    q.keep = keep->boolean;
    if (!seen.insert(q.sequence).second || ended.count(q.sequence))
      throw bad("sequence " + std::to_string(q.sequence) + " appears twice in the batch");
    std::int64_t history = 0;
    if (const cli::JsonValue* from = p.get("from")) {
      if (from->kind != cli::JsonValue::Kind::array || from->items.size() != 2) throw bad("a prompt's \"from\" must be [ring, rope]");
      q.continues = infer::Continuation{whole(from->items[0], 0, 9007199254740991.0, "a \"from\" ring position"),
                                        whole(from->items[1], 0, positions, "a \"from\" RoPE position")};
      history = q.continues->rope_position;
      if (!kept.count(q.sequence)) throw bad("a follow-up continues sequence " + std::to_string(q.sequence) + ", which this rank does not keep");
    } else if (kept.count(q.sequence)) {
      throw bad("a new prompt takes sequence " + std::to_string(q.sequence) + ", which this rank keeps for a session");
    }
    if (context > 0 && history + static_cast<std::int64_t>(tokens.size()) + q.max_tokens > context)
      throw bad("a prompt, its history and max_tokens exceed the model's context of " + std::to_string(context));
    for (const cli::JsonValue& t : tokens)
      q.tokens.push_back(static_cast<std::int32_t>(whole(t, 0, static_cast<double>(vocab - 1), "a token id (the model's vocabulary)")));
    q.sampling = infer::Sampling{static_cast<float>(number(p, "temperature", 0, 100)),
                                 static_cast<float>(number(p, "top_p", 0, 1)),
                                 static_cast<std::uint64_t>(number(p, "seed", 0, 9007199254740992.0))};
    b.prompts.push_back(std::move(q));
  }
  return b;
}

}  // namespace ringattn::serve
