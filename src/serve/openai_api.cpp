// ringattn serve — the OpenAI-style endpoint (openai_api.hpp).
#include "openai_api.hpp"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>
#include <utility>

#include "ringattn/error.hpp"
#include "ringattn/launch.hpp"
#include "../cli/json_object.hpp"
#include "../../infer/common/json.hpp"
#include "../cli/log.hpp"
#include "http_server.hpp"
#include "openai_params.hpp"
#include "openai_reply.hpp"
#include "openai_request.hpp"
#include "openai_responses.hpp"
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

// A completion's or a chat completion's reply: what every object carries, and its shapes —
// the whole response, a stream chunk, the usage chunk, [DONE].
struct ChatReply : ReplyFormat {
  bool chat = false;
  std::string id, model, session;
  std::time_t created = 0;
  bool usage_chunk = false;  // stream_options.include_usage: "usage": null in every chunk, then one with it

  cli::JsonObject head(bool chunk) const {
    cli::JsonObject o;
    o.add("id", id)
        .add("object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion")
        .add("created", static_cast<std::int64_t>(created))
        .add("model", model);
    return o;
  }
  infer::ToolSyntax syntax = infer::ToolSyntax::none;  // a chat offered tools: how its reply calls them
  std::vector<HeldText> held;                          // per choice of a stream
  void choices(std::size_t n) { held.assign(n, {}); }

  // OpenAI's tool_calls of a parsed reply (ids unique in the reply).
  std::vector<cli::JsonObject> tool_calls_json(const infer::ParsedReply& p, bool chunk) const {
    std::vector<cli::JsonObject> calls;
    for (std::size_t i = 0; i < p.calls.size(); ++i) {
      cli::JsonObject c;
      if (chunk) c.add("index", static_cast<std::int64_t>(i));
      c.add("id", "call_" + id + "_" + std::to_string(i)).add("type", "function");
      calls.push_back(c.add("function", cli::JsonObject().add("name", p.calls[i].name).add("arguments", p.calls[i].arguments)));
    }
    return calls;
  }
  // `logprobs`: the tokens' log probabilities (none: null); `calls`: the tool calls the reply made.
  cli::JsonObject choice_json(int index, bool chunk, const std::string& text, const std::string& finish, const cli::JsonObject* logprobs,
                              const infer::ParsedReply* calls = nullptr) const {
    cli::JsonObject choice;
    choice.add("index", index);
    if (chat && calls) {
      cli::JsonObject m;
      m.add("role", "assistant");
      if (calls->content.empty()) m.add_null("content");
      else m.add("content", calls->content);
      choice.add(chunk ? "delta" : "message", m.add("tool_calls", tool_calls_json(*calls, chunk)));
    } else if (chat) {
      choice.add(chunk ? "delta" : "message", cli::JsonObject().add("role", "assistant").add("content", text));
    } else {
      choice.add("text", text);
    }
    if (logprobs) choice.add("logprobs", *logprobs);
    else choice.add_null("logprobs");
    if (finish.empty()) choice.add_null("finish_reason");
    else choice.add("finish_reason", finish);
    return choice;
  }
  cli::JsonObject with_choices(bool chunk, const std::vector<cli::JsonObject>& choices) const {
    cli::JsonObject o = head(chunk);
    o.add("choices", choices);
    if (!session.empty()) o.add("session", session);  // an extension: send it back to continue the conversation
    return o;
  }
  std::string chunk(int index, const std::string& text, const std::string& finish, const cli::JsonObject* logprobs,
                    const infer::ParsedReply* calls = nullptr) const {
    cli::JsonObject o = with_choices(true, {choice_json(index, true, text, finish, logprobs, calls)});
    if (usage_chunk) o.add_null("usage");
    return sse(o.str());
  }
  static cli::JsonObject usage_of(const Usage& u) { return usage_json(static_cast<std::size_t>(u.prompt), u.cached, static_cast<int>(u.completion)); }

  std::string whole(const std::vector<Choice>& choices, const Usage& usage) override {
    std::vector<cli::JsonObject> out;
    for (std::size_t i = 0; i < choices.size(); ++i) {
      const Choice& c = choices[i];
      const std::optional<infer::ParsedReply> calls = calls_in(syntax, c.text, c.finish);
      out.push_back(choice_json(static_cast<int>(i), false, c.text, calls ? "tool_calls" : c.finish, c.logprobs ? &*c.logprobs : nullptr,
                                calls ? &*calls : nullptr));
    }
    return with_choices(false, out).add("usage", usage_of(usage)).str();
  }
  std::string delta(int index, const std::string& text, const cli::JsonObject* logprobs) override {
    HeldText& h = held[static_cast<std::size_t>(index)];
    if (syntax == infer::ToolSyntax::none || h.passing) return chunk(index, text, "", logprobs);
    const std::string out = h.pass(syntax, text);
    return h.passing ? chunk(index, out, "", logprobs) : std::string();
  }
  std::string choice_end(int index, const std::string& finish) override {
    const std::string& rest = held[static_cast<std::size_t>(index)].held;
    std::string out;
    std::string end = finish;
    if (!rest.empty()) {
      if (const std::optional<infer::ParsedReply> calls = calls_in(syntax, rest, finish)) {
        out += chunk(index, "", "", nullptr, &*calls);
        end = "tool_calls";
      } else {
        out += chunk(index, rest, "", nullptr);
      }
    }
    return out + chunk(index, "", end, nullptr);
  }
  std::string closing(const Usage& usage) override {
    std::string out;
    if (usage_chunk) {
      cli::JsonObject o = head(true);
      o.add("choices", std::vector<cli::JsonObject>{});
      if (!session.empty()) o.add("session", session);
      out += sse(o.add("usage", usage_of(usage)).str());
    }
    return out + sse("[DONE]");
  }
};

// A request's replies (its choices: one, or n samples) as their events come: each choice's
// stop sequences, text, log probabilities and count, and the generations to tell when the
// client leaves or a stop sequence ends one.
struct Replies {
  struct One {
    StopMatcher stop;
    std::optional<LogprobsJson> logged;
    std::string text;  // a whole reply's, gathered
    std::string finish;
    int completion = 0;
    bool ended = false;
  };
  std::vector<std::shared_ptr<Generation>> gens;  // by choice index; gens[0]'s stream carries every event
  std::vector<One> choices;
  std::size_t ended = 0;
  bool opened = false;  // a stream's opening was sent

  Replies(std::vector<std::shared_ptr<Generation>> g, const Asked& a, bool chat, const infer::TextTokenizer* tok) : gens(std::move(g)) {
    for (std::size_t i = 0; i < gens.size(); ++i) {
      choices.push_back({StopMatcher(a.stop), std::nullopt, {}, {}, 0, false});
      if (a.logprobs >= 0) choices.back().logged.emplace(chat, tok);
    }
  }
  TokenStream& stream() { return *gens.front()->stream; }
  void cancel() {
    for (auto& g : gens) g->cancelled = true;
  }
  std::int64_t completion() const {
    std::int64_t n = 0;
    for (const One& c : choices) n += c.completion;
    return n;
  }
  std::int64_t cached() const { return gens.front()->cached; }
  bool done() const { return ended == choices.size(); }
  // A token's text into choice e.index: the text now known to come before any stop sequence
  // (a stop sequence ends the choice: its generation stops as a whole reply).
  std::string take(const TokenEvent& e) {
    One& c = choices[static_cast<std::size_t>(e.index)];
    ++c.completion;
    if (c.logged && e.logprobs) c.logged->add(e.token, *e.logprobs);
    std::string text = c.stop.feed(e.piece);
    if (c.stop.matched()) {
      gens[static_cast<std::size_t>(e.index)]->stopped = true;
      end(c, "stop");
    }
    return text;
  }
  // A choice's done event: its text held back till the end.
  std::string take_done(const TokenEvent& e) {
    One& c = choices[static_cast<std::size_t>(e.index)];
    std::string held = c.stop.feed(e.piece);
    const bool matched = c.stop.matched();
    held += c.stop.flush();
    end(c, matched ? "stop" : e.finish_reason);
    return held;
  }
  void end(One& c, const std::string& finish) {
    if (c.ended) return;
    c.ended = true;
    c.finish = finish;
    ++ended;
  }
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

// A whole (unstreamed) reply: every choice's tokens gathered, the stop strings held back
// till they match or end. Between tokens, each heartbeat: has the client closed its
// connection? Then the request is cancelled before the ring spends more on a reply nobody reads.
void answer_whole(Replies& r, ReplyFormat& reply, std::size_t prompt_tokens, Metrics& metrics, httplib::Response& res) {
  while (!r.done()) {
    std::optional<TokenEvent> e;
    for (auto silent = std::chrono::milliseconds(0); !e && silent < kSilence; silent += kHeartbeat) {
      if ((e = r.stream().next(kHeartbeat))) break;
      if (HttpServer::client_gone()) {
        if (!r.gens.front()->cancelled) metrics.add("ringattn_api_clients_gone_total");
        r.cancel();
        throw server_error(499, "the client closed the connection");  // nobody reads it
      }
    }
    if (!e) {
      r.cancel();
      throw server_error(504, "no token from the ring in 120 s");
    }
    if (e->kind == TokenEvent::Kind::error) {
      r.cancel();
      throw server_error(e->status, e->error);
    }
    Replies::One& c = r.choices[static_cast<std::size_t>(e->index)];
    if (c.ended) continue;  // after its stop sequence
    c.text += e->kind == TokenEvent::Kind::done ? r.take_done(*e) : r.take(*e);
  }
  std::vector<Choice> choices;
  for (Replies::One& c : r.choices) choices.push_back({c.text, c.finish, c.logged ? std::optional(c.logged->take()) : std::nullopt});
  res.set_content(reply.whole(choices, Usage{static_cast<std::int64_t>(prompt_tokens), r.cached(), r.completion()}), "application/json");
}

// A streamed reply's content provider: each call sends what the next event gives (a
// comment line each heartbeat while the ring is silent; the format's opening first), each
// choice's end, and the format's closing once every choice ended; a write that fails
// cancels the generations.
httplib::ContentProviderWithoutLength stream_provider(std::shared_ptr<Replies> r, std::shared_ptr<ReplyFormat> reply, std::size_t prompt_tokens,
                                                      Metrics& metrics) {
  return [r, reply, prompt_tokens, &metrics](std::size_t, httplib::DataSink& sink) {
    auto write = [&](const std::string& line) {
      if (line.empty() || sink.write(line.data(), line.size())) return true;
      if (!r->gens.front()->cancelled) metrics.add("ringattn_api_clients_gone_total");  // its tokens are dropped
      r->cancel();
      return false;
    };
    if (!r->opened) {
      r->opened = true;
      if (!write(reply->opening())) return false;
    }
    // A piece of a choice's text with the log probabilities of its tokens (those of tokens
    // whose text was held back go with the next text sent).
    auto text_chunk = [&](int index, const std::string& text) {
      Replies::One& c = r->choices[static_cast<std::size_t>(index)];
      if (!c.logged || c.logged->empty()) return write(reply->delta(index, text, nullptr));
      const cli::JsonObject lp = c.logged->take();
      return write(reply->delta(index, text, &lp));
    };
    auto fail_with = [&](const ApiError& e) {
      r->cancel();
      write(sse(error_json(e)));
      sink.done();
      return true;
    };
    std::optional<TokenEvent> e;
    for (auto silent = std::chrono::milliseconds(0); !e && silent < kSilence; silent += kHeartbeat)
      if (!(e = r->stream().next(kHeartbeat)) && !write(": waiting for the ring\n\n")) return false;
    if (!e) return fail_with(server_error(504, "no token from the ring in 120 s"));
    if (e->kind == TokenEvent::Kind::error) return fail_with(server_error(e->status, e->error));
    Replies::One& c = r->choices[static_cast<std::size_t>(e->index)];
    if (c.ended) return true;  // after its stop sequence
    const std::string text = e->kind == TokenEvent::Kind::done ? r->take_done(*e) : r->take(*e);
    if (!c.ended) return text.empty() || text_chunk(e->index, text);  // all held back: nothing to send yet
    // The choice ended: the text held back, its end, and once all ended the format's.
    if ((!text.empty() || (c.logged && !c.logged->empty())) && !text_chunk(e->index, text)) return false;
    if (!write(reply->choice_end(e->index, c.finish))) return false;
    if (!r->done()) return true;
    if (!write(reply->closing(Usage{static_cast<std::int64_t>(prompt_tokens), r->cached(), r->completion()}))) return false;
    sink.done();
    return true;
  };
}

// What makes a reply's format once its request is admitted.
using MakeFormat = std::function<std::shared_ptr<ReplyFormat>(const Generation& g, const Asked& a)>;

// A request (a completion's body, or a chat's: `chat`) parsed and checked, submitted to the
// ring, answered whole or streamed in the format `make` gives.
void generate(RingService& service, Metrics& metrics, const HostedModel& model, const std::string& body, httplib::Response& res, bool chat,
              const MakeFormat& make) {
  if (const std::string h = service.health(); h != "ok") throw server_error(503, "the ring is " + h + "; try again once it is ready");
  const Asked a = parse_request(body, chat, model, service.limits());
  const std::uint64_t id = service.next_job_id();
  // Choice i: its own sampler (the seed + i), its own constraint; the samples copy g's rows.
  auto make_generation = [&](int i) {
    auto x = std::make_shared<Generation>();
    x->id = id;
    x->index = i;
    x->prompt = a.prompt;
    x->max_tokens = a.max_tokens;
    x->sampling = a.sampling;
    x->sampling.seed += static_cast<std::uint64_t>(i);
    x->top_logprobs = a.logprobs;
    x->logit_bias = a.logit_bias;
    x->presence_penalty = a.presence_penalty;
    x->frequency_penalty = a.frequency_penalty;
    if (a.grammar) {  // structured output, or a forced tool call in its syntax's frame
      const infer::ToolFrame frame = a.forced_frame.value_or(infer::ToolFrame{});
      const infer::TextTokenizer& tok = *model.job.tokenizer;
      x->constraint = std::make_unique<Constraint>(*a.grammar, *model.token_bytes, model.options.end_tokens, tok.encode(frame.open, false),
                                                   frame.open, tok.encode(frame.close, false), frame.close);
    }
    return x;
  };
  auto g = make_generation(0);
  std::vector<std::shared_ptr<Generation>> gens{g};
  for (int i = 1; i < a.n; ++i) {
    gens.push_back(make_generation(i));
    gens.back()->stream = g->stream;  // one stream, events by choice
    gens.back()->copy_of = g.get();
    g->samples.push_back(gens.back());
  }
  try {
    service.submit_generation(g, a.open_session, a.session);
  } catch (const Refusal& e) {
    throw refused(e, chat);
  }
  const std::shared_ptr<ReplyFormat> reply = make(*g, a);
  auto r = std::make_shared<Replies>(std::move(gens), a, chat, model.job.tokenizer.get());
  const std::size_t prompt_tokens = g->prompt.size();  // a follow-up's: with the last reply's unfed token
  if (!a.stream) return answer_whole(*r, *reply, prompt_tokens, metrics, res);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", stream_provider(r, reply, prompt_tokens, metrics), [r](bool success) {
    if (!success) r->cancel();
  });
}

// POST /v1/completions (chat false) and /v1/chat/completions.
void complete(RingService& service, Metrics& metrics, const HostedModel& model, const httplib::Request& req, httplib::Response& res,
              bool chat) {
  generate(service, metrics, model, req.body, res, chat, [&](const Generation& g, const Asked& a) {
    auto r = std::make_shared<ChatReply>();
    r->chat = chat;
    r->id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(g.id);
    r->created = std::time(nullptr);
    r->model = model.name;
    r->session = g.session;
    r->usage_chunk = a.include_usage;
    r->syntax = a.tool_syntax;
    r->choices(static_cast<std::size_t>(a.n));
    return r;
  });
}

// POST /v1/responses: converted to a chat (openai_responses.hpp) and answered in its shape.
void respond(RingService& service, Metrics& metrics, const HostedModel& model, ResponseStore& store, const httplib::Request& req,
             httplib::Response& res) {
  const ResponsesRequest r = read_responses_request(req.body, store);
  generate(service, metrics, model, r.chat_body, res, true, [&](const Generation& g, const Asked& a) {
    return make_responses_reply(r, g.id, model.name, a.tool_syntax, r.store ? &store : nullptr);
  });
}

// GET and DELETE /v1/responses/ID: a stored response.
void add_stored_response_routes(httplib::Server& s, ResponseStore& store) {
  const char* path = R"(/v1/responses/(resp_[0-9]{1,20}))";
  auto not_found = [](const std::string& id) {
    return ApiError{404, "No response with id '" + id + "' is stored (stored with \"store\": false, deleted, evicted or lost with a restart)",
                    "", "not_found"};
  };
  s.Get(path, guarded([&store, not_found](const httplib::Request& req, httplib::Response& res) {
          const std::string id = req.matches[1];
          const std::optional<std::string> r = store.response(id);
          if (!r) throw not_found(id);
          res.set_content(*r, "application/json");
        }));
  s.Delete(path, guarded([&store, not_found](const httplib::Request& req, httplib::Response& res) {
             const std::string id = req.matches[1];
             if (!store.erase(id)) throw not_found(id);
             res.set_content(cli::JsonObject().add("id", id).add("object", "response").add("deleted", true).str(), "application/json");
           }));
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
  fail(res, {res.status, res.status == 404 ? "not found: POST /v1/completions, /v1/chat/completions or /v1/responses, GET /v1/models, DELETE /v1/sessions/ID"
                         : res.status == 413 ? (form ? "a form-encoded body is bounded to 8 KiB: send JSON as Content-Type: application/json (1 MiB at most)"
                                                     : "the body is larger than 1 MiB")
                                             : "the request was refused (HTTP " + std::to_string(res.status) + ")"});
}

}  // namespace

OpenAiEndpoint::OpenAiEndpoint(const std::string& listen, std::string api_key, RingService& service, Metrics& metrics)
    : responses_(std::make_unique<ResponseStore>()), server_(std::make_unique<HttpServer>(listen, "--api", api_limits())) {
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
             complete(service, metrics, *model, req, res, chat);
           }));
  s.Post("/v1/responses", guarded([&service, &metrics, model, store = responses_.get()](const httplib::Request& req, httplib::Response& res) {
           respond(service, metrics, *model, *store, req, res);
         }));
  add_stored_response_routes(s, *responses_);
  add_page_routes(s, service, metrics);  // GET / and /v1/ring
  s.set_error_handler(explain_refusal);
  server_->start();
  cli::logger("serve")->info("OpenAI-style endpoint on http://{}/v1 ({})", listen, "completions, chat/completions, responses, models");
}

OpenAiEndpoint::~OpenAiEndpoint() = default;

}  // namespace ringattn::serve
