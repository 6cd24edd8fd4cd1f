// ringattn serve — an OpenAI-style request read and checked, and its refusals (openai_request.hpp).
#include "openai_request.hpp"

#include <httplib.h>

#include <cmath>
#include <cstdio>
#include <optional>

#include "ringattn/error.hpp"
#include "../cli/json_object.hpp"
#include "../../infer/constrain/json_schema.hpp"
#include "openai_params.hpp"
#include "ring_service.hpp"
#include "sessions.hpp"

namespace ringattn::serve {

using infer::Json;

namespace {

constexpr std::size_t kMaxBody = 1 << 20;

// A chat template renders within the request's own deadline and in at most 64 MiB made (a
// request's 1 MiB of messages renders in a few; the 64 workers could render at once).
infer::RenderLimits render_limits() {
  infer::RenderLimits l;
  l.time = api_limits().request_deadline;
  l.made_bytes = 64 << 20;
  return l;
}
constexpr int kMaxChoices = 16;  // n: samples of one prompt (each holds its own rows)
constexpr std::size_t kMaxStops = 4;           // OpenAI's
constexpr std::size_t kMaxStopBytes = 1024;    // each; held-back text is scanned per token

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
      "supported: one prompt a request; \"n\" asks for several samples of it)";
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

// A chat's tools and tool_choice (OpenAI's shapes: [{"type": "function", "function": {"name",
// "description", "parameters"}}]; "auto", "none", "required" or {"type": "function",
// "function": {"name"}}).
void read_tools(const Json& j, const HostedModel& m, Asked& a) {
  const Json* tools = infer::json_field(j, "tools");
  const Json* choice = infer::json_field(j, "tool_choice");
  const bool offered = given(tools) && !(tools->is_array() && tools->empty());
  if (offered) {
    if (!tools->is_array() || tools->size() > 128) throw bad("tools", "\"tools\" must be an array of at most 128 {\"type\": \"function\", \"function\": {...}}");
    for (const Json& t : *tools) {
      const Json* f = infer::json_field(t, "function");
      const std::string* type = infer::json_string(t, "type");
      if (!type || *type != "function" || !f || !f->is_object() || !infer::json_string(*f, "name"))
        throw bad("tools", "every tool must be {\"type\": \"function\", \"function\": {\"name\", \"parameters\"...}}");
    }
    a.tools = *tools;
  }
  if (given(choice)) {
    if (choice->is_string() && (*choice == "auto" || *choice == "none" || *choice == "required")) {
      a.tool_choice = choice->get<std::string>();
    } else {
      const Json* f = choice->is_object() ? infer::json_field(*choice, "function") : nullptr;
      const std::string* name = f ? infer::json_string(*f, "name") : nullptr;
      if (!name) throw bad("tool_choice", "\"tool_choice\" must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\"}}");
      a.tool_choice = "function";
      a.tool_name = *name;
      bool known = false;
      if (offered)
        for (const Json& t : *tools) known = known || *infer::json_string(t.at("function"), "name") == *name;
      if (!known) throw bad("tool_choice", "\"tool_choice\" names the function \"" + name->substr(0, 100) + "\", which \"tools\" does not offer");
    }
  }
  if ((a.tool_choice == "required") && !offered) throw bad("tool_choice", "\"tool_choice\": \"required\" needs \"tools\"");
  a.tools_offered = offered && a.tool_choice != "none";
  a.tool_syntax = a.tools_offered ? m.job.chat.tools : infer::ToolSyntax::none;
  if (a.tool_choice != "required" && a.tool_choice != "function") return;
  if (a.tool_syntax == infer::ToolSyntax::none)
    throw bad("tool_choice", "this model's chat template teaches it no tool-call syntax this endpoint knows (Hermes/Qwen, Llama 3, Mistral): \"tool_choice\" cannot force a call");
  // The reply is a call: the syntax's frame around JSON the grammar of the tools' parameters allows.
  try {
    a.grammar = infer::constrain::json_schema_grammar(infer::tool_call_schema(a.tool_syntax, a.tools, a.tool_name));
  } catch (const infer::constrain::Unsupported& e) {
    throw bad("tools", std::string("a tool's parameters cannot be enforced: ") + e.what());
  }
  a.forced_frame = infer::tool_frame(a.tool_syntax);
}

// response_format: {"type": "text"}, {"type": "json_object"} (any JSON object) or
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} (docs/structured_output.md).
void read_response_format(const Json& j, Asked& a) {
  const Json* f = infer::json_field(j, "response_format");
  if (!given(f)) return;
  const std::string* type = f->is_object() ? infer::json_string(*f, "type") : nullptr;
  if (!type || (*type != "text" && *type != "json_object" && *type != "json_schema"))
    throw bad("response_format", "\"response_format\" must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {\"name\", \"schema\"}}");
  if (*type == "text") return;
  if (a.grammar) throw bad("response_format", "\"response_format\" cannot constrain a reply that a forced \"tool_choice\" constrains already", "invalid_parameter_combination");
  if (*type == "json_object") {
    a.grammar = infer::constrain::json_object_grammar();
    return;
  }
  const Json* js = infer::json_field(*f, "json_schema");
  const Json* schema = js && js->is_object() ? infer::json_field(*js, "schema") : nullptr;
  if (!schema) throw bad("response_format", "\"response_format\" json_schema needs \"json_schema\": {\"name\", \"schema\": {...}}");
  try {
    a.grammar = infer::constrain::json_schema_grammar(*schema);
  } catch (const infer::constrain::Unsupported& e) {
    throw bad("response_format", std::string("the schema cannot be enforced: ") + e.what() + " (docs/structured_output.md lists what can)");
  }
}

// A chat request's messages as the prompt's text: rendered by the model's chat template
// (templated: the template wrote the BOS), or a llama2.c model's messages one per line.
void read_messages(const Json& j, const HostedModel& m, Asked& a, std::string& text, bool& templated) {
  read_tools(j, m, a);
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
    try {
      text = m.job.chat.render(*msgs, a.tools_offered ? a.tools : Json(nullptr), render_limits());
    } catch (const std::runtime_error& e) {
      throw bad("messages", std::string("the model's chat template refused these messages: ") + e.what());
    }
    templated = true;
  } else if (m.options.llama2c.empty()) {
    throw bad("messages", m.job.chat.refused + ": use /v1/completions with the prompt as text");
  } else {  // llama2.c's models have no chat format: the messages' text, one per line
    for (const Json& msg : *msgs) {  // (appended in steps: GCC 12's -Wrestrict misreads "\n" + string here)
      if (!text.empty()) text += '\n';
      text += msg.at("content").get_ref<const std::string&>();
    }
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
  a.n = static_cast<int>(number("n", 1, kMaxChoices, 1, true));
  if (a.n > 1 && (a.open_session || !a.session.empty()))
    throw bad("n", "\"n\" > 1 cannot be used with a session: which sample's rows would it keep?", "invalid_parameter_combination");
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

}  // namespace

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
ApiError bad(std::string param, std::string message, std::string code) {
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

bool given(const Json* v) { return v && !v->is_null(); }

Json read_body(const std::string& body) {
  Json j;
  try {
    j = infer::parse_json(body);
  } catch (const std::exception& e) {
    throw bad("", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad("", "the body must be a JSON object");
  return j;
}

// The request's fields, each checked; throws ApiError naming the field.
Asked parse_request(const std::string& body, bool chat, const HostedModel& m, const RingLimits& limits) {
  const Json j = read_body(body);
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
  read_response_format(j, a);
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


}  // namespace ringattn::serve
