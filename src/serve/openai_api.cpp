// ringattn serve — the OpenAI-style endpoint (openai_api.hpp).
#include "src/serve/openai_api.hpp"

#include <httplib.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <optional>

#include "ringattn/error.hpp"
#include "ringattn/launch.hpp"
#include "src/cli/json_object.hpp"
#include "src/cli/json_value.hpp"
#include "src/cli/log.hpp"
#include "src/serve/ring_service.hpp"
#include "src/serve/sessions.hpp"

namespace ringattn::serve {

namespace {

constexpr std::size_t kMaxBody = 1 << 20;
constexpr std::size_t kThreads = 16;                    // connections served at once
constexpr auto kSilence = std::chrono::seconds(120);    // longest wait for the ring's next token
// A stream silent this long (a long prefill, a busy ring) gets an SSE comment line, which
// clients ignore: proxies keep the connection, and a client that has left is found by the
// failed write and its request cancelled before the ring spends more on it.
constexpr auto kHeartbeat = std::chrono::seconds(1);

struct ApiError {
  int status;
  std::string message;
  std::string type = "invalid_request_error";
};

std::string error_json(const ApiError& e) {
  return cli::JsonObject()
      .add("error", cli::JsonObject().add("message", e.message).add("type", e.type).add("code", e.status))
      .str();
}

void fail(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), "application/json");
}

bool same(const std::string& a, const std::string& b) {  // in time independent of where they differ
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
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
  bool stream = false;
  bool open_session = false;  // "session": true
  std::string session;        // "session": "sess-N"
};

// The request's fields, each checked; throws ApiError (400) naming the field.
Asked parse_request(const std::string& body, bool chat, const HostedModel& m, const RingLimits& limits) {
  cli::JsonValue j;
  try {
    j = cli::parse_json(body);
  } catch (const std::exception& e) {
    throw ApiError{400, std::string("the body is not valid JSON: ") + e.what()};
  }
  if (j.kind != cli::JsonValue::Kind::object) throw ApiError{400, "the body must be a JSON object"};
  Asked a;
  if (const cli::JsonValue* s = j.get("session"); s && s->kind != cli::JsonValue::Kind::null) {
    if (s->kind == cli::JsonValue::Kind::boolean) a.open_session = s->boolean;
    else if (s->kind == cli::JsonValue::Kind::string && s->string.rfind("sess-", 0) == 0 && s->string.size() <= 32) a.session = s->string;
    else throw ApiError{400, "\"session\" must be true (open one) or a session id \"sess-N\" this endpoint returned"};
  }
  std::string text;
  std::optional<std::vector<std::int32_t>> ids;  // a prompt given as token ids
  if (chat) {
    const cli::JsonValue* msgs = j.get("messages");
    if (!msgs || msgs->kind != cli::JsonValue::Kind::array || msgs->items.empty())
      throw ApiError{400, "\"messages\" must be a non-empty array of {\"role\", \"content\"}"};
    for (const cli::JsonValue& msg : msgs->items) {
      const cli::JsonValue* c = msg.get("content");
      if (!c || c->kind != cli::JsonValue::Kind::string) throw ApiError{400, "every message needs a string \"content\""};
      text += (text.empty() ? "" : "\n") + c->string;
    }
  } else {
    const cli::JsonValue* p = j.get("prompt");
    if (p && p->kind == cli::JsonValue::Kind::array && !p->items.empty()) {
      ids.emplace();
      for (const cli::JsonValue& t : p->items) {
        if (t.kind != cli::JsonValue::Kind::number || !(t.number >= 0 && t.number < static_cast<double>(m.options.model.vocab)) ||
            t.number != std::floor(t.number))
          throw ApiError{400, "\"prompt\" as token ids: each an integer in [0, " + std::to_string(m.options.model.vocab) + ")"};
        ids->push_back(static_cast<std::int32_t>(t.number));
      }
    } else if (p && p->kind == cli::JsonValue::Kind::string) {
      text = p->string;
    } else {
      throw ApiError{400, "\"prompt\" must be a string or a non-empty array of token ids"};
    }
  }
  auto number = [&](const char* key, double lo, double hi, double def, bool whole) {
    const cli::JsonValue* v = j.get(key);
    if (!v || v->kind == cli::JsonValue::Kind::null) return def;
    if (v->kind != cli::JsonValue::Kind::number || !(v->number >= lo && v->number <= hi) || (whole && v->number != std::floor(v->number)))
      throw ApiError{400, std::string("\"") + key + "\" must be " + (whole ? "an integer" : "a number") + " in [" + shortest(lo) +
                              ", " + shortest(hi) + "]"};
    return v->number;
  };
  a.max_tokens = static_cast<int>(number("max_tokens", 1, 1 << 20, 16, true));
  a.sampling.temperature = static_cast<float>(number("temperature", 0, 2, 1, false));
  a.sampling.top_p = static_cast<float>(number("top_p", 0, 1, 1, false));
  a.sampling.seed = static_cast<std::uint64_t>(number("seed", 0, 9007199254740991.0, 1, true));
  if (number("n", 1, 1, 1, true) != 1) throw ApiError{400, "\"n\" must be 1"};
  if (const cli::JsonValue* s = j.get("stream"); s && s->kind != cli::JsonValue::Kind::null) {
    if (s->kind != cli::JsonValue::Kind::boolean) throw ApiError{400, "\"stream\" must be true or false"};
    a.stream = s->boolean;
  }
  // BOS opens a text, not a session's next message (its history is already in the caches).
  const bool bos = a.session.empty();
  if (ids) {
    if (bos) a.prompt.push_back(infer::Tokenizer::kBos);
    a.prompt.insert(a.prompt.end(), ids->begin(), ids->end());
  } else {
    for (const int t : m.job.tokenizer->encode(text, bos, false)) a.prompt.push_back(t);
  }
  if (a.prompt.empty()) throw ApiError{400, "a session's next message needs at least one token"};
  const auto n = static_cast<std::int64_t>(a.prompt.size());
  if (n > limits.max_rows)
    throw ApiError{400, "the prompt's " + std::to_string(n) + " tokens exceed the ring's max_rows of " +
                            std::to_string(limits.max_rows) + " (one rank may hold a whole prompt)"};
  return a;
}

// One response object or stream chunk.
std::string choice_json(bool chat, bool chunk, const std::string& id, std::time_t created, const std::string& model,
                        const std::string& text, const std::string& finish, const cli::JsonObject* usage, const std::string& session) {
  cli::JsonObject choice;
  choice.add("index", 0);
  if (chat) choice.add(chunk ? "delta" : "message", cli::JsonObject().add("role", "assistant").add("content", text));
  else choice.add("text", text).add_null("logprobs");
  if (finish.empty()) choice.add_null("finish_reason");
  else choice.add("finish_reason", finish);
  cli::JsonObject o;
  o.add("id", id)
      .add("object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion")
      .add("created", static_cast<std::int64_t>(created))
      .add("model", model)
      .add("choices", std::vector<cli::JsonObject>{choice});
  if (!session.empty()) o.add("session", session);  // an extension: send it back to continue the conversation
  if (usage) o.add("usage", *usage);
  return o.str();
}

cli::JsonObject usage_json(std::size_t prompt, int completion) {
  return cli::JsonObject()
      .add("prompt_tokens", static_cast<std::int64_t>(prompt))
      .add("completion_tokens", completion)
      .add("total_tokens", static_cast<std::int64_t>(prompt) + completion);
}

}  // namespace

OpenAiEndpoint::OpenAiEndpoint(const std::string& listen, std::string api_key, RingService& service, Metrics& metrics)
    : server_(std::make_unique<httplib::Server>()) {
  const HostPort at = parse_host_port(listen, "--api");
  httplib::Server& s = *server_;
  s.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  s.set_payload_max_length(kMaxBody);
  s.set_read_timeout(10, 0);
  s.set_write_timeout(30, 0);
  s.set_keep_alive_max_count(100);
  s.set_pre_routing_handler([key = std::move(api_key), &metrics](const httplib::Request& req, httplib::Response& res) {
    if (key.empty() || same(req.get_header_value("Authorization"), "Bearer " + key)) return httplib::Server::HandlerResponse::Unhandled;
    metrics.add("ringattn_api_requests_total", {{"status", "401"}});
    res.set_header("WWW-Authenticate", "Bearer");
    fail(res, {401, "a bearer token is required: Authorization: Bearer <the daemon's api key>", "authentication_error"});
    return httplib::Server::HandlerResponse::Handled;
  });
  const HostedModel* model = service.model();
  s.Get("/v1/models", [model](const httplib::Request&, httplib::Response& res) {
    cli::JsonObject m;
    m.add("id", model->name).add("object", "model").add("owned_by", "ringattn");
    res.set_content(cli::JsonObject().add("object", "list").add("data", std::vector<cli::JsonObject>{m}).str(), "application/json");
  });
  auto handle = [&service, &metrics, model](const httplib::Request& req, httplib::Response& res, bool chat) {
    try {
      if (const std::string h = service.health(); h != "ok")
        throw ApiError{503, "the ring is " + h + "; try again once it is ready", "server_error"};
      const Asked a = parse_request(req.body, chat, *model, service.limits());
      auto g = std::make_shared<Generation>();
      g->id = service.next_job_id();
      g->prompt = a.prompt;
      g->max_tokens = a.max_tokens;
      g->sampling = a.sampling;
      try {
        service.submit_generation(g, a.open_session, a.session);
      } catch (const Refusal& e) {
        throw ApiError{e.status(), e.what(), e.status() >= 500 ? "server_error" : "invalid_request_error"};
      }
      metrics.add("ringattn_api_requests_total", {{"status", "200"}});
      const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(g->id);
      const std::time_t created = std::time(nullptr);
      const std::string name = model->name;
      const std::size_t prompt_tokens = g->prompt.size();  // a follow-up's: with the last reply's unfed token
      const std::string session = g->session;
      if (!a.stream) {
        std::string text, finish;
        int completion = 0;
        for (;;) {
          const std::optional<TokenEvent> e = g->stream.next(kSilence);
          if (!e) {
            g->cancelled = true;
            throw ApiError{504, "no token from the ring in 120 s", "server_error"};
          }
          if (e->kind == TokenEvent::Kind::error) throw ApiError{e->status, e->error, "server_error"};
          if (e->kind == TokenEvent::Kind::done) {
            finish = e->finish_reason;
            break;
          }
          text += e->piece;
          ++completion;
        }
        const cli::JsonObject usage = usage_json(prompt_tokens, completion);
        res.set_content(choice_json(chat, false, id, created, name, text, finish, &usage, session), "application/json");
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      auto completion = std::make_shared<int>(0);
      res.set_chunked_content_provider(
          "text/event-stream",
          [g, chat, id, created, name, prompt_tokens, completion, session, &metrics](std::size_t, httplib::DataSink& sink) {
            auto write = [&](const std::string& line) {
              if (sink.write(line.data(), line.size())) return true;
              if (!g->cancelled.exchange(true)) metrics.add("ringattn_api_clients_gone_total");  // its tokens are dropped
              return false;
            };
            auto send = [&](const std::string& data) { return write("data: " + data + "\n\n"); };
            std::optional<TokenEvent> e;
            for (auto silent = std::chrono::milliseconds(0); !e && silent < kSilence; silent += kHeartbeat)
              if (!(e = g->stream.next(kHeartbeat)) && !write(": waiting for the ring\n\n")) return false;
            if (!e) {
              g->cancelled = true;
              send(error_json({504, "no token from the ring in 120 s", "server_error"}));
              sink.done();
              return true;
            }
            switch (e->kind) {
              case TokenEvent::Kind::token:
                ++*completion;
                return send(choice_json(chat, true, id, created, name, e->piece, "", nullptr, session));
              case TokenEvent::Kind::done: {
                const cli::JsonObject usage = usage_json(prompt_tokens, *completion);
                if (!send(choice_json(chat, true, id, created, name, "", e->finish_reason, &usage, session)) || !send("[DONE]")) return false;
                sink.done();
                return true;
              }
              case TokenEvent::Kind::error:
                send(error_json({e->status, e->error, "server_error"}));
                sink.done();
                return true;
            }
            return false;
          },
          [g](bool success) {
            if (!success) g->cancelled = true;
          });
    } catch (const ApiError& e) {
      metrics.add("ringattn_api_requests_total", {{"status", std::to_string(e.status)}});
      fail(res, e);
    }
  };
  s.Delete(R"(/v1/sessions/(sess-[0-9]+))", [&service, &metrics](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    try {
      service.close_session(id);
      metrics.add("ringattn_api_requests_total", {{"status", "200"}});
      res.set_content(cli::JsonObject().add("id", id).add("object", "session").add("deleted", true).str(), "application/json");
    } catch (const Refusal& e) {
      metrics.add("ringattn_api_requests_total", {{"status", std::to_string(e.status())}});
      fail(res, {e.status(), e.what()});
    }
  });
  s.Post("/v1/completions", [handle](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
  s.Post("/v1/chat/completions", [handle](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    fail(res, {res.status, res.status == 404 ? "not found: POST /v1/completions or /v1/chat/completions, GET /v1/models, DELETE /v1/sessions/ID"
                          : res.status == 413 ? "the body is larger than 1 MiB"
                                              : "the request was refused (HTTP " + std::to_string(res.status) + ")"});
  });
  if (!s.bind_to_port(at.host, at.port))
    throw NetworkError("--api " + listen + ": cannot listen there (in use, or not this host's address)");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  cli::logger("serve")->info("OpenAI-style endpoint on http://{}/v1 ({})", listen, "completions, chat/completions, models");
}

OpenAiEndpoint::~OpenAiEndpoint() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ringattn::serve
