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
  std::string held;      // a stream's text that may still be a tool call
  bool passing = false;  // the stream's text is not a call: it goes out as it comes

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
  cli::JsonObject with_choice(bool chunk, const std::string& text, const std::string& finish, const cli::JsonObject* logprobs,
                              const infer::ParsedReply* calls = nullptr) const {
    cli::JsonObject choice;
    choice.add("index", 0);
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
    cli::JsonObject o = head(chunk);
    o.add("choices", std::vector<cli::JsonObject>{choice});
    if (!session.empty()) o.add("session", session);  // an extension: send it back to continue the conversation
    return o;
  }
  std::string chunk(const std::string& text, const std::string& finish, const cli::JsonObject* logprobs,
                    const infer::ParsedReply* calls = nullptr) const {
    cli::JsonObject o = with_choice(true, text, finish, logprobs, calls);
    if (usage_chunk) o.add_null("usage");
    return sse(o.str());
  }
  // A reply that offered tools and ended on its own: its calls, if it made any.
  std::optional<infer::ParsedReply> calls_in(const std::string& text, const std::string& finish) const {
    if (syntax == infer::ToolSyntax::none || finish == "length") return std::nullopt;
    infer::ParsedReply p = infer::parse_tool_calls(syntax, text);
    if (p.calls.empty()) return std::nullopt;
    return p;
  }
  static cli::JsonObject usage_of(const Usage& u) { return usage_json(static_cast<std::size_t>(u.prompt), u.cached, static_cast<int>(u.completion)); }

  std::string whole(const std::string& text, const std::string& finish, const Usage& usage, const cli::JsonObject* logprobs) override {
    const std::optional<infer::ParsedReply> calls = calls_in(text, finish);
    return with_choice(false, text, calls ? "tool_calls" : finish, logprobs, calls ? &*calls : nullptr).add("usage", usage_of(usage)).str();
  }
  // With tools offered, text that could still be a call is held till it cannot, or the end.
  std::string delta(const std::string& text, const cli::JsonObject* logprobs) override {
    if (syntax == infer::ToolSyntax::none || passing) return chunk(text, "", logprobs);
    held += text;
    if (infer::may_be_tool_call(syntax, held)) return {};
    passing = true;
    return chunk(std::exchange(held, {}), "", logprobs);
  }
  std::string closing(const std::string& finish, const Usage& usage) override {
    std::string out;
    std::string end = finish;
    if (!held.empty()) {
      if (const std::optional<infer::ParsedReply> calls = calls_in(held, finish)) {
        out += chunk("", "", nullptr, &*calls);
        end = "tool_calls";
      } else {
        out += chunk(held, "", nullptr);
      }
    }
    out += chunk("", end, nullptr);
    if (usage_chunk) {
      cli::JsonObject o = head(true);
      o.add("choices", std::vector<cli::JsonObject>{});
      if (!session.empty()) o.add("session", session);
      out += sse(o.add("usage", usage_of(usage)).str());
    }
    return out + sse("[DONE]");
  }
};

// A streamed reply's state between the calls of its content provider.
struct Streamed {
  StopMatcher stop;
  std::optional<LogprobsJson> logged;  // when asked: the tokens' log probabilities not yet sent
  int completion = 0;                  // tokens generated
  bool opened = false;                 // the format's opening was sent
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
void answer_whole(Generation& g, const Asked& a, ReplyFormat& reply, std::optional<LogprobsJson> logged, std::size_t prompt_tokens,
                  Metrics& metrics, httplib::Response& res) {
  StopMatcher stop(a.stop);
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
  const Usage usage{static_cast<std::int64_t>(prompt_tokens), g.cached, completion};
  res.set_content(reply.whole(text, finish, usage, lp ? &*lp : nullptr), "application/json");
}

// A streamed reply's content provider: each call sends what the next event gives (a
// comment line each heartbeat while the ring is silent; the format's opening first), and
// the format's closing at the end; a write that fails cancels the generation.
httplib::ContentProviderWithoutLength stream_provider(std::shared_ptr<Generation> g, std::shared_ptr<ReplyFormat> reply,
                                                      std::shared_ptr<Streamed> st, std::size_t prompt_tokens,
                                                      Metrics& metrics) {
  return [g, reply, st, prompt_tokens, &metrics](std::size_t, httplib::DataSink& sink) {
    auto write = [&](const std::string& line) {
      if (line.empty() || sink.write(line.data(), line.size())) return true;
      if (!g->cancelled.exchange(true)) metrics.add("ringattn_api_clients_gone_total");  // its tokens are dropped
      return false;
    };
    auto send = [&](const std::string& data) { return write(sse(data)); };
    if (!st->opened) {
      st->opened = true;
      if (!write(reply->opening())) return false;
    }
    // A piece of text with the log probabilities of its tokens (those of tokens whose text
    // was held back go with the next text sent).
    auto text_chunk = [&](const std::string& text) {
      if (!st->logged || st->logged->empty()) return write(reply->delta(text, nullptr));
      const cli::JsonObject lp = st->logged->take();
      return write(reply->delta(text, &lp));
    };
    // The text held back, then the format's end.
    auto end = [&](const std::string& held, const std::string& finish) {
      if ((!held.empty() || (st->logged && !st->logged->empty())) && !text_chunk(held)) return false;
      if (!write(reply->closing(finish, Usage{static_cast<std::int64_t>(prompt_tokens), g->cached, st->completion}))) return false;
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

// What makes a reply's format once its request is admitted.
using MakeFormat = std::function<std::shared_ptr<ReplyFormat>(const Generation& g, const Asked& a)>;

// A request (a completion's body, or a chat's: `chat`) parsed and checked, submitted to the
// ring, answered whole or streamed in the format `make` gives.
void generate(RingService& service, Metrics& metrics, const HostedModel& model, const std::string& body, httplib::Response& res, bool chat,
              const MakeFormat& make) {
  if (const std::string h = service.health(); h != "ok") throw server_error(503, "the ring is " + h + "; try again once it is ready");
  const Asked a = parse_request(body, chat, model, service.limits());
  auto g = std::make_shared<Generation>();
  g->id = service.next_job_id();
  g->prompt = a.prompt;
  g->max_tokens = a.max_tokens;
  g->sampling = a.sampling;
  g->top_logprobs = a.logprobs;
  g->logit_bias = a.logit_bias;
  g->presence_penalty = a.presence_penalty;
  g->frequency_penalty = a.frequency_penalty;
  if (a.grammar) {  // structured output, or a forced tool call in its syntax's frame
    const infer::ToolFrame frame = a.forced_frame.value_or(infer::ToolFrame{});
    const infer::TextTokenizer& tok = *model.job.tokenizer;
    g->constraint = std::make_unique<Constraint>(*a.grammar, *model.token_bytes, model.options.end_tokens,
                                                 tok.encode(frame.open, false), frame.open, tok.encode(frame.close, false), frame.close);
  }
  try {
    service.submit_generation(g, a.open_session, a.session);
  } catch (const Refusal& e) {
    throw refused(e, chat);
  }
  const std::shared_ptr<ReplyFormat> reply = make(*g, a);
  std::optional<LogprobsJson> logged;
  if (a.logprobs >= 0) logged.emplace(chat, model.job.tokenizer.get());
  const std::size_t prompt_tokens = g->prompt.size();  // a follow-up's: with the last reply's unfed token
  if (!a.stream) return answer_whole(*g, a, *reply, std::move(logged), prompt_tokens, metrics, res);
  res.set_header("Cache-Control", "no-cache");
  auto st = std::make_shared<Streamed>(Streamed{StopMatcher(a.stop), std::move(logged), 0, false});
  res.set_chunked_content_provider("text/event-stream", stream_provider(g, reply, st, prompt_tokens, metrics),
                                   [g](bool success) {
                                     if (!success) g->cancelled = true;
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
    return r;
  });
}

// POST /v1/responses: converted to a chat (openai_responses.hpp) and answered in its shape.
void respond(RingService& service, Metrics& metrics, const HostedModel& model, const httplib::Request& req, httplib::Response& res) {
  const ResponsesRequest r = read_responses_request(req.body);
  generate(service, metrics, model, r.chat_body, res, true,
           [&](const Generation& g, const Asked&) { return make_responses_reply(r, g.id, model.name); });
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
             complete(service, metrics, *model, req, res, chat);
           }));
  s.Post("/v1/responses", guarded([&service, &metrics, model](const httplib::Request& req, httplib::Response& res) {
           respond(service, metrics, *model, req, res);
         }));
  add_page_routes(s, service, metrics);  // GET / and /v1/ring
  s.set_error_handler(explain_refusal);
  server_->start();
  cli::logger("serve")->info("OpenAI-style endpoint on http://{}/v1 ({})", listen, "completions, chat/completions, responses, models");
}

OpenAiEndpoint::~OpenAiEndpoint() = default;

}  // namespace ringattn::serve
