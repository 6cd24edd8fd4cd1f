// ringattn serve — the OpenAI-style endpoint (openai_api.hpp).
#include "openai_api.hpp"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>

#include "ringattn/error.hpp"
#include "ringattn/launch.hpp"
#include "../cli/json_object.hpp"
#include "../../infer/common/json.hpp"
#include "../cli/log.hpp"
#include "http_server.hpp"
#include "openai_params.hpp"
#include "ring_service.hpp"
#include "sessions.hpp"
#include "web_page.hpp"

namespace ringattn::serve {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::feed(std::string_view piece) {
  if (matched_) return "";
  held_ += piece;
  std::size_t at = std::string::npos;  // where the first whole stop sequence begins
  for (const std::string& s : stops_) at = std::min(at, held_.find(s));
  if (at != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, at);
    held_.clear();
    return out;
  }
  // Everything before the first place a stop sequence could still begin is text for sure
  // (no stop sequence lies whole in held_, so one that begins there must run past its end).
  std::size_t keep = held_.size();
  for (std::size_t i = 0; i < held_.size() && keep == held_.size(); ++i) {
    const std::string_view tail = std::string_view(held_).substr(i);
    for (const std::string& s : stops_)
      if (s.size() > tail.size() && s.compare(0, tail.size(), tail) == 0) keep = i;
  }
  std::string out = held_.substr(0, keep);
  held_.erase(0, keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return matched_ ? std::string() : out;
}

namespace {

constexpr std::size_t kMaxBody = 1 << 20;

// Requests answered at once: 64 (a stream holds its worker until its last token), 16 of
// them for one address (what one could hold when a connection was a thread), its further
// requests waiting up to 30 s while others' are answered; waiting connections, slow or idle,
// hold none (1024 open, 64 from one address); a request's head within 5 s and its body
// within 10 s (http_server.hpp).
HttpLimits api_limits() {
  HttpLimits l;
  l.body_bytes = kMaxBody;
  l.threads = 64;
  l.per_client_busy = 16;
  return l;
}
// A chat template renders within the request's own deadline and in at most 64 MiB made (a
// request's 1 MiB of messages renders in a few; the 64 workers could render at once).
infer::RenderLimits render_limits() {
  infer::RenderLimits l;
  l.time = api_limits().request_deadline;
  l.made_bytes = 64 << 20;
  return l;
}
constexpr auto kSilence = std::chrono::seconds(120);    // longest wait for the ring's next token
// A stream silent this long (a long prefill, a busy ring) gets an SSE comment line, which
// clients ignore: proxies keep the connection, and a client that has left is found by the
// failed write and its request cancelled before the ring spends more on it.
constexpr auto kHeartbeat = std::chrono::seconds(1);
constexpr std::size_t kMaxStops = 4;           // OpenAI's
constexpr std::size_t kMaxStopBytes = 1024;    // each; held-back text is scanned per token

// An answer other than 200, as OpenAI words it: `param` the request's field at fault and
// `code` OpenAI's code for it (each null when empty).
struct ApiError {
  int status;
  std::string message;
  std::string param{};
  std::string code{};
  std::string type = "invalid_request_error";
};

ApiError bad(std::string param, std::string message, std::string code = "") {
  return {400, std::move(message), std::move(param), std::move(code)};
}

ApiError server_error(int status, std::string message) { return {status, std::move(message), "", "", "server_error"}; }

std::string error_json(const ApiError& e) {
  cli::JsonObject o;
  o.add("message", e.message).add("type", e.type);
  if (e.param.empty()) o.add_null("param");
  else o.add("param", e.param);
  if (e.code.empty()) o.add_null("code");
  else o.add("code", e.code);
  return cli::JsonObject().add("error", o).str();
}

void fail(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error_json(e), "application/json");
}

bool same(const std::string& a, const std::string& b) {  // in time independent of where they differ
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

// Throws 401 unless the request carries `key` as its bearer token (`key` empty: none asked).
void authorize(const std::string& key, const httplib::Request& req) {
  if (key.empty()) return;
  const std::string h = req.get_header_value("Authorization");
  if (h.rfind("Bearer ", 0) != 0 || h.size() == 7)
    throw ApiError{401, "no API key: send it as a bearer token (Authorization: Bearer <the daemon's api key>)", "", "",
                   "authentication_error"};
  if (!same(h.substr(7), key))
    throw ApiError{401, "Incorrect API key provided: the bearer token is not this daemon's api key", "", "invalid_api_key",
                   "authentication_error"};
}

std::string shortest(double x) {  // 1, 0.5, 9007199254740991
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", x);
  return b;
}

struct Asked {
  std::vector<std::int32_t> prompt;  // BOS and the prompt's ids; a session's follow-up: its ids only
  int max_tokens = 16;
  infer::Sampling sampling{1.0f, 1.0f, 1};
  std::vector<std::string> stop;  // OpenAI's stop sequences, empty ones left out
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool open_session = false;   // "session": true
  std::string session;         // "session": "sess-<32 hex digits>"
  int logprobs = -1;           // -1: none; else each token's log probability and this many alternatives
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  float presence_penalty = 0, frequency_penalty = 0;
};

using infer::Json;

bool given(const Json* v) { return v && !v->is_null(); }

std::vector<std::string> stop_sequences(const Json* v) {
  std::vector<std::string> out;
  if (!given(v)) return out;
  const std::string what = "\"stop\" must be a string or an array of at most " + std::to_string(kMaxStops) +
                           " strings, each at most " + std::to_string(kMaxStopBytes) + " bytes";
  auto one = [&](const Json& s) {
    if (!s.is_string() || s.get_ref<const std::string&>().size() > kMaxStopBytes) throw bad("stop", what);
    if (!s.get_ref<const std::string&>().empty()) out.push_back(s.get<std::string>());
  };
  if (v->is_string()) one(*v);
  else if (v->is_array() && v->size() <= kMaxStops)
    for (const Json& s : *v) one(s);
  else throw bad("stop", what);
  return out;
}

// The prompt's text or token ids (a completion's); throws 400 naming what is accepted.
void read_prompt(const Json& j, const HostedModel& m, std::string& text, std::optional<std::vector<std::int32_t>>& ids) {
  const std::string shapes =
      "\"prompt\" must be a string or a non-empty array of token ids (one prompt: an array of several prompts is not "
      "supported, as n must be 1)";
  const Json* p = infer::json_field(j, "prompt");
  // An array of one prompt, ["text"] or [[ids]], is that prompt.
  if (p && p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p && p->is_string()) {
    text = p->get<std::string>();
    return;
  }
  if (!p || !p->is_array() || p->empty()) throw bad("prompt", shapes);
  ids.emplace();
  for (const Json& t : *p) {
    if (!t.is_number()) throw bad("prompt", shapes);
    const double x = t.get<double>();
    if (!(x >= 0 && x < static_cast<double>(m.options.model.vocab)) || x != std::floor(x))
      throw bad("prompt", "\"prompt\" as token ids: each an integer in [0, " + std::to_string(m.options.model.vocab) + ")");
    ids->push_back(static_cast<std::int32_t>(x));
  }
}

// A chat request's messages as the prompt's text: rendered by the model's chat template
// (templated: the template wrote the BOS), or a llama2.c model's messages one per line.
void read_messages(const Json& j, const HostedModel& m, const Asked& a, std::string& text, bool& templated) {
  const Json* msgs = infer::json_field(j, "messages");
  if (!msgs || !msgs->is_array() || msgs->empty())
    throw bad("messages", "\"messages\" must be a non-empty array of {\"role\", \"content\"}");
  for (const Json& msg : *msgs) {
    const std::string* role = infer::json_string(msg, "role");
    const Json* c = infer::json_field(msg, "content");
    if (!role || !c || !(c->is_string() || (c->is_null() && infer::json_field(msg, "tool_calls"))))
      throw bad("messages", "every message needs a string \"role\" and a string \"content\" (null only beside \"tool_calls\")");
  }
  if (m.job.chat.tmpl) {  // the model's own chat template renders the whole conversation
    if (a.open_session || !a.session.empty())
      throw bad("session", "sessions with a chat template are not implemented: send the whole conversation in \"messages\"");
    const Json* tools = infer::json_field(j, "tools");
    try {
      text = m.job.chat.render(*msgs, given(tools) ? *tools : Json(nullptr), render_limits());
    } catch (const std::runtime_error& e) {
      throw bad("messages", std::string("the model's chat template refused these messages: ") + e.what());
    }
    templated = true;
  } else if (m.options.llama2c.empty()) {
    throw bad("messages", m.job.chat.refused + ": use /v1/completions with the prompt as text");
  } else {  // llama2.c's models have no chat format: the messages' text, one per line
    for (const Json& msg : *msgs) text += (text.empty() ? "" : "\n") + msg.at("content").get<std::string>();
  }
}

// Log probabilities, as each endpoint asks for them: a completion's "logprobs": N (0-5
// alternatives; false is none), a chat's "logprobs": true with "top_logprobs": N (0-20).
void read_logprobs(const Json& j, bool chat, Asked& a) {
  const Json* lp = infer::json_field(j, "logprobs");
  const Json* top = infer::json_field(j, "top_logprobs");
  auto count = [](const Json* v, double hi) { return v->is_number() && v->get<double>() >= 0 && v->get<double>() <= hi && v->get<double>() == std::floor(v->get<double>()); };
  if (!chat) {
    if (given(top)) throw bad("top_logprobs", "\"top_logprobs\" is a chat completion's: a completion asks with \"logprobs\": N (0-5)");
    if (!given(lp) || (lp->is_boolean() && !lp->get<bool>())) return;
    if (!count(lp, 5)) throw bad("logprobs", "\"logprobs\" must be an integer in [0, 5]: the alternatives reported beside each token");
    a.logprobs = static_cast<int>(lp->get<double>());
    return;
  }
  if (given(lp) && !lp->is_boolean()) throw bad("logprobs", "\"logprobs\" must be true or false");
  const bool on = given(lp) && lp->get<bool>();
  if (given(top) && !count(top, 20)) throw bad("top_logprobs", "\"top_logprobs\" must be an integer in [0, 20]");
  if (given(top) && !on)
    throw bad("top_logprobs", "\"top_logprobs\" needs \"logprobs\": true", "invalid_parameter_combination");
  if (on) a.logprobs = given(top) ? static_cast<int>(top->get<double>()) : 0;
}

// How the logits are shaped: logit_bias ({"token id": bias in [-100, 100]}, at most 1024)
// and the presence and frequency penalties ([-2, 2]), as OpenAI's.
void read_shaping(const Json& j, const HostedModel& m, Asked& a) {
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    const Json* v = infer::json_field(j, key);
    if (!given(v)) continue;
    if (!v->is_number() || !(v->get<double>() >= -2 && v->get<double>() <= 2))
      throw bad(key, std::string("\"") + key + "\" must be a number in [-2, 2]");
    (std::string_view(key) == "presence_penalty" ? a.presence_penalty : a.frequency_penalty) = static_cast<float>(v->get<double>());
  }
  const Json* b = infer::json_field(j, "logit_bias");
  if (!given(b)) return;
  const std::string what = "\"logit_bias\" must map at most 1024 token ids (as strings, each in [0, " +
                           std::to_string(m.options.model.vocab) + ")) to a number in [-100, 100]";
  if (!b->is_object() || b->size() > 1024) throw bad("logit_bias", what);
  for (const auto& [key, bias] : b->items()) {
    if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos) throw bad("logit_bias", what);
    const long id = std::stol(key);
    if (id >= m.options.model.vocab || !bias.is_number() || !(bias.get<double>() >= -100 && bias.get<double>() <= 100))
      throw bad("logit_bias", what);
    a.logit_bias.emplace_back(static_cast<std::int32_t>(id), static_cast<float>(bias.get<double>()));
  }
}

// The generation's fields: lengths, sampling, stop strings, streaming.
void read_generation(const Json& j, bool chat, Asked& a) {
  auto field = [&](const char* key) { return infer::json_field(j, key); };
  auto number = [&](const char* key, double lo, double hi, double def, bool whole) {
    const Json* v = field(key);
    if (!given(v)) return def;
    const double x = v->is_number() ? v->get<double>() : std::nan("");
    if (!(x >= lo && x <= hi) || (whole && x != std::floor(x)))
      throw bad(key, std::string("\"") + key + "\" must be " + (whole ? "an integer" : "a number") + " in [" + shortest(lo) + ", " +
                         shortest(hi) + "]");
    return x;
  };
  // max_completion_tokens is OpenAI's newer name for max_tokens; OpenAI refuses both at once.
  const bool completion_tokens = given(field("max_completion_tokens"));
  if (completion_tokens && given(field("max_tokens")))
    throw bad("max_tokens", "setting \"max_tokens\" and \"max_completion_tokens\" at the same time is not supported (one is the other's newer name)",
              "invalid_parameter_combination");
  a.max_tokens = static_cast<int>(number(completion_tokens ? "max_completion_tokens" : "max_tokens", 1, 1 << 20, 16, true));
  a.sampling.temperature = static_cast<float>(number("temperature", 0, 2, 1, false));
  a.sampling.top_p = static_cast<float>(number("top_p", 0, 1, 1, false));
  a.sampling.seed = static_cast<std::uint64_t>(number("seed", 0, 9007199254740991.0, 1, true));
  if (number("n", 1, 1, 1, true) != 1) throw bad("n", "\"n\" must be 1");
  read_logprobs(j, chat, a);
  a.stop = stop_sequences(field("stop"));
  if (!a.stop.empty() && (a.open_session || !a.session.empty()))
    throw bad("stop", "\"stop\" cannot be used with a session: the session's history would hold text its reply left out");
  if (const Json* s = field("stream"); given(s)) {
    if (!s->is_boolean()) throw bad("stream", "\"stream\" must be true or false");
    a.stream = s->get<bool>();
  }
  if (const Json* o = field("stream_options"); given(o)) {
    if (!a.stream) throw bad("stream_options", "\"stream_options\" is only allowed with \"stream\": true");
    const Json* u = infer::json_field(*o, "include_usage");
    if (!o->is_object() || (given(u) && !u->is_boolean()))
      throw bad("stream_options", "\"stream_options\" must be an object such as {\"include_usage\": true}");
    a.include_usage = given(u) && u->get<bool>();
  }
}

// The prompt's tokens (BOS opens a text, not a session's next message: its history is
// already in the caches), bounded where the request enters: by the model's trained context
// first (what the client can change its request for; a session's history is added when it
// is admitted, sessions.cpp), then by the ring's max_rows.
void tokenize(const HostedModel& m, const RingLimits& limits, const std::string& field, const std::string& text,
              const std::optional<std::vector<std::int32_t>>& ids, bool templated, Asked& a) {
  const bool bos = a.session.empty();
  if (ids) {
    if (bos)
      for (const int t : m.job.tokenizer->opening()) a.prompt.push_back(t);
    a.prompt.insert(a.prompt.end(), ids->begin(), ids->end());
  } else {
    try {
      for (const int t : m.job.tokenizer->encode(text, bos && !templated)) a.prompt.push_back(t);
    } catch (const ringattn::InvalidArgument& e) {  // a token the model has no row for (text_tokenizer.hpp)
      throw bad(field, e.what());
    }
  }
  if (a.prompt.empty())
    throw bad(field, bos ? "the prompt is no tokens: an empty text, and this model's tokenizer adds no BOS"
                         : "a session's next message needs at least one token");
  const auto n = static_cast<std::int64_t>(a.prompt.size());
  const std::int64_t context = m.options.model.context;
  if (context > 0 && n + a.max_tokens > context)
    throw bad(field,
              "this model's maximum context length is " + std::to_string(context) + " tokens: the prompt's " + std::to_string(n) +
                  " tokens and max_tokens " + std::to_string(a.max_tokens) + " exceed the model's context of " + std::to_string(context) +
                  " positions",
              "context_length_exceeded");
  if (n > limits.max_rows)
    throw bad(field, "the prompt's " + std::to_string(n) + " tokens exceed the ring's max_rows of " + std::to_string(limits.max_rows) +
                         " (one rank may hold a whole prompt)");
}

// The request's fields, each checked; throws ApiError naming the field.
Asked parse_request(const std::string& body, bool chat, const HostedModel& m, const RingLimits& limits) {
  Json j;
  try {
    j = infer::parse_json(body);
  } catch (const std::exception& e) {
    throw bad("", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad("", "the body must be a JSON object");
  if (const Json* v = infer::json_field(j, "model"); given(v)) {
    if (!v->is_string()) throw bad("model", "\"model\" must be a string: the hosted model's id, " + m.name);
    if (v->get<std::string>() != m.name)
      throw ApiError{404, "The model `" + v->get<std::string>().substr(0, 100) + "` does not exist: this endpoint hosts " + m.name +
                              " (GET /v1/models)",
                     "model", "model_not_found"};
  }
  // A parameter this endpoint would ignore, with a value that asks for something: refused.
  if (const auto u = unsupported_parameter(j, chat)) throw bad(u->name, u->message, "unsupported_parameter");
  Asked a;
  if (const Json* s = infer::json_field(j, "session"); given(s)) {
    if (s->is_boolean()) a.open_session = s->get<bool>();
    else if (s->is_string() && s->get<std::string>().rfind("sess-", 0) == 0 && s->get<std::string>().size() <= 64) a.session = s->get<std::string>();
    else throw bad("session", "\"session\" must be true (open one) or a session id \"sess-...\" this endpoint returned");
  }
  std::string text;
  std::optional<std::vector<std::int32_t>> ids;  // a prompt given as token ids
  bool templated = false;                        // text is the chat template's: the tokenizer adds no BOS
  if (chat) read_messages(j, m, a, text, templated);
  else read_prompt(j, m, text, ids);
  read_generation(j, chat, a);
  read_shaping(j, m, a);
  tokenize(m, limits, chat ? "messages" : "prompt", text, ids, templated, a);
  return a;
}

// A refusal of the ring service (sessions.hpp) as an answer.
ApiError refused(const Refusal& e, bool chat) {
  ApiError a{e.status(), e.what()};
  if (e.status() >= 500) a.type = "server_error";
  if (e.status() == 400) {  // SessionTable::admit's one: a session's history, the prompt and max_tokens exceed the context
    a.param = chat ? "messages" : "prompt";
    a.code = "context_length_exceeded";
  }
  if (e.status() == 404 || e.status() == 409) a.param = "session";
  return a;
}

// `cached`: the prompt's tokens whose rows the prefix cache held (not computed), as OpenAI reports them.
cli::JsonObject usage_json(std::size_t prompt, std::int64_t cached, int completion) {
  return cli::JsonObject()
      .add("prompt_tokens", static_cast<std::int64_t>(prompt))
      .add("completion_tokens", completion)
      .add("total_tokens", static_cast<std::int64_t>(prompt) + completion)
      .add("prompt_tokens_details", cli::JsonObject().add("cached_tokens", cached));
}

// The log probabilities of a reply's tokens in the endpoint's shape, gathered as the tokens
// come and taken with the text they go with (a whole reply's once, a stream's per chunk).
// A completion's: {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}],
// "text_offset"} (offsets into the generated text, as vLLM counts them); a chat's:
// {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
// "refusal": null}. A token's text is its own bytes (ill-formed UTF-8 shows as U+FFFD, its
// "bytes" exact).
class LogprobsJson {
 public:
  LogprobsJson(bool chat, const infer::TextTokenizer* tok) : chat_(chat), tok_(tok) {}
  void add(std::int32_t token, const infer::TokenLogprobs& lp) {
    const std::string text = piece(token);
    if (chat_) {
      std::vector<cli::JsonObject> top;
      for (const auto& [id, x] : lp.top) top.push_back(entry(piece(id), x));
      content_.push_back(entry(text, lp.logprob).add("top_logprobs", top));
    } else {
      tokens_.push_back(text);
      logprobs_.push_back(lp.logprob);
      cli::JsonObject top;
      std::vector<std::string> seen;  // two ids of one text: the likelier one (keys are unique)
      for (const auto& [id, x] : lp.top)
        if (std::string t = piece(id); std::find(seen.begin(), seen.end(), t) == seen.end()) {
          top.add(t, x);
          seen.push_back(std::move(t));
        }
      top_.push_back(std::move(top));
      offsets_.push_back(offset_);
      offset_ += static_cast<std::int64_t>(text.size());
    }
  }
  bool empty() const { return content_.empty() && tokens_.empty(); }
  cli::JsonObject take() {
    cli::JsonObject o;
    if (chat_) {
      o.add("content", content_).add_null("refusal");
    } else {
      o.add("tokens", tokens_).add("token_logprobs", logprobs_).add("top_logprobs", top_).add("text_offset", offsets_);
    }
    content_.clear();
    tokens_.clear();
    logprobs_.clear();
    top_.clear();
    offsets_.clear();
    return o;
  }

 private:
  std::string piece(std::int32_t id) const {
    const int t = id;
    return tok_ ? tok_->text(std::span<const int>(&t, 1)) : std::string();
  }
  static cli::JsonObject entry(const std::string& text, double logprob) {
    std::vector<std::int64_t> bytes;
    for (const char c : text) bytes.push_back(static_cast<unsigned char>(c));
    return cli::JsonObject().add("token", text).add("logprob", logprob).add("bytes", bytes);
  }
  bool chat_;
  const infer::TextTokenizer* tok_;
  std::vector<cli::JsonObject> content_, top_;
  std::vector<std::string> tokens_;
  std::vector<double> logprobs_;
  std::vector<std::int64_t> offsets_;
  std::int64_t offset_ = 0;
};

// What every object of one reply carries, and its shapes: the whole response, a stream
// chunk, the usage chunk.
struct Reply {
  bool chat = false;
  std::string id, model, session;
  std::time_t created = 0;
  bool usage_chunk = false;  // stream_options.include_usage: "usage": null in every chunk, then one with it
  const infer::TextTokenizer* tokenizer = nullptr;  // the tokens' texts, for log probabilities

  cli::JsonObject head(bool chunk) const {
    cli::JsonObject o;
    o.add("id", id)
        .add("object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion")
        .add("created", static_cast<std::int64_t>(created))
        .add("model", model);
    return o;
  }
  // `logprobs`: the tokens' log probabilities (none: null).
  cli::JsonObject with_choice(bool chunk, const std::string& text, const std::string& finish, const cli::JsonObject* logprobs) const {
    cli::JsonObject choice;
    choice.add("index", 0);
    if (chat) choice.add(chunk ? "delta" : "message", cli::JsonObject().add("role", "assistant").add("content", text));
    else choice.add("text", text);
    if (logprobs) choice.add("logprobs", *logprobs);
    else choice.add_null("logprobs");
    if (finish.empty()) choice.add_null("finish_reason");
    else choice.add("finish_reason", finish);
    cli::JsonObject o = head(chunk);
    o.add("choices", std::vector<cli::JsonObject>{choice});
    if (!session.empty()) o.add("session", session);  // an extension: send it back to continue the conversation
    return o;
  }
  std::string whole(const std::string& text, const std::string& finish, const cli::JsonObject& usage, const cli::JsonObject* logprobs) const {
    return with_choice(false, text, finish, logprobs).add("usage", usage).str();
  }
  std::string chunk(const std::string& text, const std::string& finish, const cli::JsonObject* logprobs = nullptr) const {
    cli::JsonObject o = with_choice(true, text, finish, logprobs);
    if (usage_chunk) o.add_null("usage");
    return o.str();
  }
  std::string usage(const cli::JsonObject& counts) const {
    cli::JsonObject o = head(true);
    o.add("choices", std::vector<cli::JsonObject>{});
    if (!session.empty()) o.add("session", session);
    return o.add("usage", counts).str();
  }
};

// A streamed reply's state between the calls of its content provider.
struct Streamed {
  StopMatcher stop;
  std::optional<LogprobsJson> logged;  // when asked: the tokens' log probabilities not yet sent
  int completion = 0;                  // tokens generated
};

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

// A handler whose ApiError becomes the answer.
Handler guarded(Handler h) {
  return [h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
    try {
      h(req, res);
    } catch (const ApiError& e) {
      fail(res, e);
    }
  };
}

// A whole (unstreamed) reply: the tokens gathered, the stop strings held back till they
// match or end. Between tokens, each heartbeat: has the client closed its connection? Then
// the request is cancelled before the ring spends more on a reply nobody reads.
void answer_whole(Generation& g, const Asked& a, const Reply& reply, std::size_t prompt_tokens, Metrics& metrics,
                  httplib::Response& res) {
  StopMatcher stop(a.stop);
  std::optional<LogprobsJson> logged;
  if (a.logprobs >= 0) logged.emplace(reply.chat, reply.tokenizer);
  std::string text, finish;
  int completion = 0;
  for (;;) {
    std::optional<TokenEvent> e;
    for (auto silent = std::chrono::milliseconds(0); !e && silent < kSilence; silent += kHeartbeat) {
      if ((e = g.stream.next(kHeartbeat))) break;
      if (HttpServer::client_gone()) {
        if (!g.cancelled.exchange(true)) metrics.add("ringattn_api_clients_gone_total");
        throw server_error(499, "the client closed the connection");  // nobody reads it
      }
    }
    if (!e) {
      g.cancelled = true;
      throw server_error(504, "no token from the ring in 120 s");
    }
    if (e->kind == TokenEvent::Kind::error) throw server_error(e->status, e->error);
    if (e->kind == TokenEvent::Kind::done) {  // with the text held back till the end
      text += stop.feed(e->piece);
      finish = stop.matched() ? "stop" : e->finish_reason;
      text += stop.flush();
      break;
    }
    ++completion;
    if (logged && e->logprobs) logged->add(e->token, *e->logprobs);
    text += stop.feed(e->piece);
    if (stop.matched()) {
      g.stopped = true;  // the ring ends it as a whole reply
      finish = "stop";
      break;
    }
  }
  const std::optional<cli::JsonObject> lp = logged ? std::optional(logged->take()) : std::nullopt;
  res.set_content(reply.whole(text, finish, usage_json(prompt_tokens, g.cached, completion), lp ? &*lp : nullptr), "application/json");
}

// A streamed reply's content provider: each call sends what the next event gives (a
// comment line each heartbeat while the ring is silent), the finishing chunk, usage if
// asked and [DONE] at the end; a write that fails cancels the generation.
httplib::ContentProviderWithoutLength stream_provider(std::shared_ptr<Generation> g, Reply reply,
                                                      std::shared_ptr<Streamed> st, std::size_t prompt_tokens,
                                                      Metrics& metrics) {
  return [g, reply, st, prompt_tokens, &metrics](std::size_t, httplib::DataSink& sink) {
    auto write = [&](const std::string& line) {
      if (sink.write(line.data(), line.size())) return true;
      if (!g->cancelled.exchange(true)) metrics.add("ringattn_api_clients_gone_total");  // its tokens are dropped
      return false;
    };
    auto send = [&](const std::string& data) { return write("data: " + data + "\n\n"); };
    // The text held back, the finishing chunk, usage if asked, [DONE].
    // A chunk of text with the log probabilities of its tokens (those of tokens whose text
    // was held back go with the next text sent).
    auto text_chunk = [&](const std::string& text) {
      if (!st->logged || st->logged->empty()) return send(reply.chunk(text, ""));
      const cli::JsonObject lp = st->logged->take();
      return send(reply.chunk(text, "", &lp));
    };
    auto end = [&](const std::string& held, const std::string& finish) {
      if ((!held.empty() || (st->logged && !st->logged->empty())) && !text_chunk(held)) return false;
      if (!send(reply.chunk("", finish))) return false;
      if (reply.usage_chunk && !send(reply.usage(usage_json(prompt_tokens, g->cached, st->completion)))) return false;
      if (!send("[DONE]")) return false;
      sink.done();
      return true;
    };
    std::optional<TokenEvent> e;
    for (auto silent = std::chrono::milliseconds(0); !e && silent < kSilence; silent += kHeartbeat)
      if (!(e = g->stream.next(kHeartbeat)) && !write(": waiting for the ring\n\n")) return false;
    if (!e) {
      g->cancelled = true;
      send(error_json(server_error(504, "no token from the ring in 120 s")));
      sink.done();
      return true;
    }
    switch (e->kind) {
      case TokenEvent::Kind::token: {
        ++st->completion;
        if (st->logged && e->logprobs) st->logged->add(e->token, *e->logprobs);
        const std::string text = st->stop.feed(e->piece);
        if (st->stop.matched()) {
          g->stopped = true;  // the ring ends it as a whole reply
          return end(text, "stop");
        }
        return text.empty() || text_chunk(text);  // all held back: nothing to send yet
      }
      case TokenEvent::Kind::done: {  // with the text held back till the end
        std::string held = st->stop.feed(e->piece);
        const bool matched = st->stop.matched();
        held += st->stop.flush();
        return end(held, matched ? "stop" : e->finish_reason);
      }
      case TokenEvent::Kind::error:
        send(error_json(server_error(e->status, e->error)));
        sink.done();
        return true;
    }
    return false;
  };
}

// POST /v1/completions (chat false) and /v1/chat/completions: the request parsed and
// checked, submitted to the ring, answered whole or streamed.
void generate(RingService& service, Metrics& metrics, const HostedModel& model, const httplib::Request& req,
              httplib::Response& res, bool chat) {
  if (const std::string h = service.health(); h != "ok") throw server_error(503, "the ring is " + h + "; try again once it is ready");
  const Asked a = parse_request(req.body, chat, model, service.limits());
  auto g = std::make_shared<Generation>();
  g->id = service.next_job_id();
  g->prompt = a.prompt;
  g->max_tokens = a.max_tokens;
  g->sampling = a.sampling;
  g->top_logprobs = a.logprobs;
  g->logit_bias = a.logit_bias;
  g->presence_penalty = a.presence_penalty;
  g->frequency_penalty = a.frequency_penalty;
  try {
    service.submit_generation(g, a.open_session, a.session);
  } catch (const Refusal& e) {
    throw refused(e, chat);
  }
  Reply reply;
  reply.chat = chat;
  reply.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(g->id);
  reply.created = std::time(nullptr);
  reply.model = model.name;
  reply.session = g->session;
  reply.usage_chunk = a.include_usage;
  reply.tokenizer = model.job.tokenizer.get();
  const std::size_t prompt_tokens = g->prompt.size();  // a follow-up's: with the last reply's unfed token
  if (!a.stream) return answer_whole(*g, a, reply, prompt_tokens, metrics, res);
  res.set_header("Cache-Control", "no-cache");
  auto st = std::make_shared<Streamed>(Streamed{StopMatcher(a.stop), std::nullopt, 0});
  if (a.logprobs >= 0) st->logged.emplace(chat, model.job.tokenizer.get());
  res.set_chunked_content_provider("text/event-stream", stream_provider(g, reply, st, prompt_tokens, metrics),
                                   [g](bool success) {
                                     if (!success) g->cancelled = true;
                                   });
}

// GET /v1/models and /v1/models/ID: the one model hosted.
void add_model_routes(httplib::Server& s, const HostedModel* model) {
  const auto model_json = [model] {
    return cli::JsonObject().add("id", model->name).add("object", "model").add("created", 0).add("owned_by", "ringattn");
  };
  s.Get("/v1/models", guarded([model_json](const httplib::Request&, httplib::Response& res) {
          res.set_content(cli::JsonObject().add("object", "list").add("data", std::vector<cli::JsonObject>{model_json()}).str(),
                          "application/json");
        }));
  s.Get("/v1/models/(.+)", guarded([model, model_json](const httplib::Request& req, httplib::Response& res) {
          if (req.matches[1] != model->name)
            throw ApiError{404, "The model `" + req.matches[1].str().substr(0, 100) + "` does not exist: this endpoint hosts " + model->name,
                           "model", "model_not_found"};
          res.set_content(model_json().str(), "application/json");
        }));
}

// What httplib answered without a handler (404, 413, 400), as an OpenAI error body.
void explain_refusal(const httplib::Request& req, httplib::Response& res) {
  if (!res.body.empty()) return;
  // httplib bounds a form-encoded body to 8 KiB (curl -d sends one unless told otherwise).
  const bool form = req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0;
  fail(res, {res.status, res.status == 404 ? "not found: POST /v1/completions or /v1/chat/completions, GET /v1/models, DELETE /v1/sessions/ID"
                         : res.status == 413 ? (form ? "a form-encoded body is bounded to 8 KiB: send JSON as Content-Type: application/json (1 MiB at most)"
                                                     : "the body is larger than 1 MiB")
                                             : "the request was refused (HTTP " + std::to_string(res.status) + ")"});
}

}  // namespace

OpenAiEndpoint::OpenAiEndpoint(const std::string& listen, std::string api_key, RingService& service, Metrics& metrics)
    : server_(std::make_unique<HttpServer>(listen, "--api", api_limits())) {
  httplib::Server& s = server_->routes();
  // The key is checked before anything else: a client without it costs the reading of one
  // bounded request (1 MiB within 10 s, by the server's gate, on no worker) and nothing of
  // the ring.
  s.set_pre_routing_handler([key = api_key](const httplib::Request& req, httplib::Response& res) {
    if (is_public_page(req)) return httplib::Server::HandlerResponse::Unhandled;  // holds no data (web_page.hpp)
    try {
      authorize(key, req);
      return httplib::Server::HandlerResponse::Unhandled;
    } catch (const ApiError& e) {
      fail(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }
  });
  // Every answer is counted once, whoever gave it (a handler, or httplib: 404, 413, 400, or
  // the server before httplib: 431, 503 for a client over its connections).
  server_->on_refusal([&metrics](int status) { metrics.add("ringattn_api_requests_total", {{"status", std::to_string(status)}}); });
  s.set_post_routing_handler([&metrics](const httplib::Request&, httplib::Response& res) {
    metrics.add("ringattn_api_requests_total", {{"status", std::to_string(res.status)}});
  });
  const HostedModel* model = service.model();
  add_model_routes(s, model);
  s.Delete(R"(/v1/sessions/(sess-[0-9a-f]{1,59}))", guarded([&service](const httplib::Request& req, httplib::Response& res) {
             const std::string id = req.matches[1];
             try {
               service.close_session(id);
             } catch (const Refusal& e) {
               throw ApiError{e.status(), e.what()};
             }
             res.set_content(cli::JsonObject().add("id", id).add("object", "session").add("deleted", true).str(), "application/json");
           }));
  for (const bool chat : {false, true})
    s.Post(chat ? "/v1/chat/completions" : "/v1/completions",
           guarded([&service, &metrics, model, chat](const httplib::Request& req, httplib::Response& res) {
             generate(service, metrics, *model, req, res, chat);
           }));
  add_page_routes(s, service, metrics);  // GET / and /v1/ring
  s.set_error_handler(explain_refusal);
  server_->start();
  cli::logger("serve")->info("OpenAI-style endpoint on http://{}/v1 ({})", listen, "completions, chat/completions, models");
}

OpenAiEndpoint::~OpenAiEndpoint() = default;

}  // namespace ringattn::serve
