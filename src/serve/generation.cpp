// ringattn serve — a generation request's events and the GENERATE batch (generation.hpp).
#include "src/serve/generation.hpp"

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

std::string encode_batch(const std::vector<std::shared_ptr<Generation>>& batch, int max_tokens) {
  std::vector<cli::JsonObject> prompts;
  for (const auto& g : batch) {
    std::vector<std::int64_t> ids(g->prompt.begin(), g->prompt.end());
    prompts.push_back(cli::JsonObject()
                          .add("tokens", ids)
                          .add("temperature", static_cast<double>(g->sampling.temperature))
                          .add("top_p", static_cast<double>(g->sampling.top_p))
                          .add("seed", static_cast<std::uint64_t>(g->sampling.seed)));
  }
  return cli::JsonObject().add("max_tokens", max_tokens).add("prompts", prompts).str();
}

DecodedBatch decode_batch(const std::string& payload, std::int64_t vocab, std::int64_t context, std::int64_t max_tokens_total) {
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
  DecodedBatch b;
  b.max_tokens = static_cast<int>(number(j, "max_tokens", 1, static_cast<double>(context > 0 ? context : 1 << 20)));
  const cli::JsonValue* prompts = j.get("prompts");
  if (!prompts || prompts->kind != cli::JsonValue::Kind::array || prompts->items.empty())
    throw bad("\"prompts\" must be a non-empty array");
  std::int64_t total = 0;
  for (const cli::JsonValue& p : prompts->items) {
    const cli::JsonValue* tokens = p.get("tokens");
    if (!tokens || tokens->kind != cli::JsonValue::Kind::array || tokens->items.empty())
      throw bad("a prompt's \"tokens\" must be a non-empty array");
    total += static_cast<std::int64_t>(tokens->items.size());
    if (total > max_tokens_total) throw bad("the batch holds more than " + std::to_string(max_tokens_total) + " tokens");
    if (context > 0 && static_cast<std::int64_t>(tokens->items.size()) + b.max_tokens > context)
      throw bad("a prompt and max_tokens exceed the model's context of " + std::to_string(context));
    infer::Prompt q;
    q.id = std::to_string(b.prompts.size());
    for (const cli::JsonValue& t : tokens->items) {
      if (t.kind != cli::JsonValue::Kind::number || !(t.number >= 0 && t.number < static_cast<double>(vocab)) ||
          t.number != std::floor(t.number))
        throw bad("a token id outside the model's vocabulary of " + std::to_string(vocab));
      q.tokens.push_back(static_cast<std::int32_t>(t.number));
    }
    q.sampling = infer::Sampling{static_cast<float>(number(p, "temperature", 0, 100)),
                                 static_cast<float>(number(p, "top_p", 0, 1)),
                                 static_cast<std::uint64_t>(number(p, "seed", 0, 9007199254740992.0))};
    b.prompts.push_back(std::move(q));
  }
  return b;
}

}  // namespace ringattn::serve
