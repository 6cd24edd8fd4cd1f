// ringattn serve — POST /v1/responses by conversion to a chat (openai_responses.hpp).
#include "openai_responses.hpp"

#include <cmath>
#include <ctime>
#include <optional>
#include <utility>
#include <vector>

#include "../../infer/common/json.hpp"
#include "openai_request.hpp"

namespace ringattn::serve {

namespace {

using infer::Json;

ApiError unsupported(const std::string& param, const std::string& what) {
  return bad(param, what + " is not supported by this endpoint's /v1/responses", "unsupported_parameter");
}

// A message's content: a text, or parts of input_text / output_text joined.
std::string content_text(const Json& c, std::size_t i) {
  const std::string where = "input[" + std::to_string(i) + "].content";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad("input", "\"" + where + "\" must be a string or an array of {\"type\": \"input_text\", \"text\"} parts");
  std::string text;
  for (const Json& part : c) {
    const std::string* type = infer::json_string(part, "type");
    const std::string* t = infer::json_string(part, "text");
    if (type && (*type == "input_text" || *type == "output_text") && t) {
      text += *t;
      continue;
    }
    if (type && !type->empty() && type->size() < 64) throw unsupported("input", "a content part of type \"" + *type + "\" (" + where + ")");
    throw bad("input", "every part of \"" + where + "\" needs a \"type\" (input_text) and a string \"text\"");
  }
  return text;
}

// The chat's messages but the instructions: a previous response's conversation, then the input.
Json conversation_of(const Json& j, ResponsesRequest& r, ResponseStore& stored) {
  Json msgs = Json::array();
  if (const Json* prev = infer::json_field(j, "previous_response_id"); given(prev)) {
    if (!prev->is_string() || prev->get<std::string>().empty() || prev->get<std::string>().size() > 64)
      throw bad("previous_response_id", "\"previous_response_id\" must be a response's id (resp_...)");
    r.previous = prev->get<std::string>();
    std::optional<Json> before = stored.conversation(*r.previous);
    if (!before)
      throw bad("previous_response_id",
                "Previous response with id '" + *r.previous + "' not found: it was stored with \"store\": false, deleted, evicted (the store keeps the " +
                    std::to_string(ResponseStore::kMaxEntries) + " most recently used, within " + std::to_string(ResponseStore::kMaxBytes >> 20) +
                    " MiB) or lost when the daemon restarted; send the whole conversation as input",
                "previous_response_not_found");
    msgs = std::move(*before);
  }
  const Json* input = infer::json_field(j, "input");
  if (!given(input)) throw bad("input", "\"input\" is required: a text, or an array of messages {\"role\", \"content\"}");
  if (input->is_string()) {
    msgs.push_back(Json{{"role", "user"}, {"content", input->get<std::string>()}});
    return msgs;
  }
  if (!input->is_array() || input->empty()) throw bad("input", "\"input\" must be a text or a non-empty array of messages");
  for (std::size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    const std::string at = "input[" + std::to_string(i) + "]";
    const std::string* type = infer::json_string(item, "type");
    if (type && *type == "function_call") {  // a call the model made: the assistant's tool_calls (consecutive ones: one message)
      const std::string* id = infer::json_string(item, "call_id");
      const std::string* name = infer::json_string(item, "name");
      const std::string* args = infer::json_string(item, "arguments");
      if (!id || !name || !args) throw bad("input", at + " (a function_call) needs string \"call_id\", \"name\" and \"arguments\"");
      Json call = {{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", *args}}}};
      if (!msgs.empty() && msgs.back()["role"] == "assistant" && msgs.back().contains("tool_calls")) {
        msgs.back()["tool_calls"].push_back(std::move(call));
      } else {
        msgs.push_back(Json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({std::move(call)})}});
      }
      continue;
    }
    if (type && *type == "function_call_output") {  // its result: a tool message
      const std::string* id = infer::json_string(item, "call_id");
      const Json* out = infer::json_field(item, "output");
      if (!id || !given(out)) throw bad("input", at + " (a function_call_output) needs a string \"call_id\" and an \"output\"");
      msgs.push_back(Json{{"role", "tool"}, {"tool_call_id", *id}, {"content", content_text(*out, i)}});
      continue;
    }
    if (type && *type != "message") {
      if (type->size() < 64) throw unsupported("input", "an input item of type \"" + *type + "\" (" + at + ")");
      throw bad("input", at + " has an unknown type");
    }
    const std::string* role = infer::json_string(item, "role");
    const Json* c = infer::json_field(item, "content");
    if (!role || !c) throw bad("input", at + " needs a \"role\" and a \"content\"");
    if (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer")
      throw bad("input", at + ".role must be user, assistant, system or developer");
    msgs.push_back(Json{{"role", *role == "developer" ? "system" : *role}, {"content", content_text(*c, i)}});
  }
  return msgs;
}

// `tools` (function tools, the Responses API's flat shape) and `tool_choice` as the chat's.
void tools_of(const Json& j, ResponsesRequest& r, Json& chat) {
  if (const Json* t = infer::json_field(j, "tools"); given(t)) {
    if (!t->is_array()) throw bad("tools", "\"tools\" must be an array of {\"type\": \"function\", \"name\", \"parameters\"}");
    Json tools = Json::array();
    for (std::size_t i = 0; i < t->size(); ++i) {
      const Json& tool = (*t)[i];
      const std::string* type = infer::json_string(tool, "type");
      if (type && *type != "function" && type->size() < 64)
        throw unsupported("tools", "a tool of type \"" + *type + "\" (tools[" + std::to_string(i) + "]; function tools are)");
      const std::string* name = infer::json_string(tool, "name");
      if (!type || !name) throw bad("tools", "tools[" + std::to_string(i) + "] needs \"type\": \"function\" and a string \"name\"");
      Json fn = {{"name", *name}};
      for (const char* key : {"description", "parameters", "strict"})
        if (const Json* v = infer::json_field(tool, key); given(v)) fn[key] = *v;
      tools.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
    }
    r.tools = *t;
    if (!tools.empty()) chat["tools"] = std::move(tools);
  }
  if (const Json* c = infer::json_field(j, "tool_choice"); given(c)) {
    r.tool_choice = *c;
    if (c->is_string()) {
      chat["tool_choice"] = *c;  // auto, none, required (the chat checks)
    } else {
      const std::string* type = c->is_object() ? infer::json_string(*c, "type") : nullptr;
      const std::string* name = c->is_object() ? infer::json_string(*c, "name") : nullptr;
      if (type && *type != "function" && type->size() < 64) throw unsupported("tool_choice", "a tool_choice of type \"" + *type + "\"");
      if (!type || !name)
        throw bad("tool_choice", "\"tool_choice\" must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\"}");
      chat["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", *name}}}};
    }
  }
  if (const Json* p = infer::json_field(j, "parallel_tool_calls"); given(p)) chat["parallel_tool_calls"] = *p;
}

// The parameters that ask for what this endpoint does not do, unless at a value that asks
// for nothing.
void refuse_unsupported(const Json& j) {
  auto is = [&](const char* key, const char* value) { const Json* v = infer::json_field(j, key); return !given(v) || *v == infer::parse_json(value); };
  if (!is("background", "false")) throw unsupported("background", "\"background\": true");
  if (const Json* t = infer::json_field(j, "text"); given(t)) {
    const Json* f = t->is_object() ? infer::json_field(*t, "format") : nullptr;
    const std::string* type = given(f) && f->is_object() ? infer::json_string(*f, "type") : nullptr;
    if (!t->is_object() || (given(f) && !(type && (*type == "text" || *type == "json_object" || *type == "json_schema"))))
      throw unsupported("text", "\"text\" other than {\"format\": {\"type\": \"text\" | \"json_object\" | \"json_schema\"}}");
  }
  if (const Json* v = infer::json_field(j, "reasoning"); given(v) && !(v->is_object() && v->empty())) throw unsupported("reasoning", "\"reasoning\"");
  if (const Json* v = infer::json_field(j, "include"); given(v) && !(v->is_array() && v->empty())) throw unsupported("include", "\"include\"");
  if (!is("truncation", "\"disabled\"")) throw unsupported("truncation", "\"truncation\" other than \"disabled\"");
  if (!is("top_logprobs", "0")) throw unsupported("top_logprobs", "\"top_logprobs\"");
  if (const Json* v = infer::json_field(j, "service_tier"); given(v) && !(*v == "auto" || *v == "default")) throw unsupported("service_tier", "\"service_tier\"");
}

// A response's usage, in the Responses API's words.
cli::JsonObject usage_object(const Usage& u) {
  return cli::JsonObject()
      .add("input_tokens", u.prompt)
      .add("input_tokens_details", cli::JsonObject().add("cached_tokens", u.cached))
      .add("output_tokens", u.completion)
      .add("output_tokens_details", cli::JsonObject().add("reasoning_tokens", 0))
      .add("total_tokens", u.prompt + u.completion);
}

class ResponsesReply : public ReplyFormat {
 public:
  ResponsesReply(ResponsesRequest r, std::uint64_t id, std::string model, infer::ToolSyntax syntax, ResponseStore* store)
      : r_(std::move(r)), id_(response_id(id)), item_("msg_" + std::to_string(id)), model_(std::move(model)),
        created_(std::time(nullptr)), syntax_(syntax), store_(store) {}

  std::string whole(const std::vector<Choice>& choices, const Usage& usage) override {
    const Choice& c = choices.front();  // a response has one
    const bool cut = c.finish == "length";
    const char* status = cut ? "incomplete" : "completed";
    std::vector<cli::JsonObject> output;
    const std::optional<infer::ParsedReply> calls = calls_in(syntax_, c.text, c.finish);
    if (calls) {
      if (!calls->content.empty()) output.push_back(message(calls->content, status));
      for (std::size_t k = 0; k < calls->calls.size(); ++k) output.push_back(function_call(k, calls->calls[k], "completed", true));
    } else {
      output.push_back(message(c.text, status));
    }
    std::string out = response(status, output, &usage, cut).str();
    keep(calls ? calls->content : c.text, calls ? &*calls : nullptr, out);
    return out;
  }
  std::string opening() override {
    std::string out = emit("response.created", ev("response.created").add("response", response("in_progress", {}, nullptr, false)));
    out += emit("response.in_progress", ev("response.in_progress").add("response", response("in_progress", {}, nullptr, false)));
    if (syntax_ == infer::ToolSyntax::none) out += open_message();  // else once the text cannot be a call
    return out;
  }
  std::string delta(int, const std::string& text, const cli::JsonObject*) override {
    if (text.empty()) return {};
    if (syntax_ == infer::ToolSyntax::none || held_.passing) return text_delta(text);
    const std::string out = held_.pass(syntax_, text);
    return held_.passing ? open_message() + text_delta(out) : std::string();
  }
  std::string choice_end(int, const std::string& finish) override {
    finish_ = finish;
    return {};
  }
  std::string closing(const Usage& usage) override {
    const bool cut = finish_ == "length";
    const char* status = cut ? "incomplete" : "completed";
    const char* last = cut ? "response.incomplete" : "response.completed";
    std::string out;
    const std::optional<infer::ParsedReply> calls = held_.held.empty() ? std::nullopt : calls_in(syntax_, held_.held, finish_);
    const std::string text = calls ? calls->content : std::exchange(held_.held, {});
    if (!text.empty() || (!calls && !message_open_)) out += open_message() + text_delta(text);
    std::vector<cli::JsonObject> output;
    if (message_open_) {
      out += emit("response.output_text.done",
                  at_place(ev("response.output_text.done")).add("text", text_).add("logprobs", std::vector<cli::JsonObject>{}));
      out += emit("response.content_part.done", at_place(ev("response.content_part.done")).add("part", part(text_)));
      out += emit("response.output_item.done", ev("response.output_item.done").add("output_index", 0).add("item", message(text_, status)));
      output.push_back(message(text_, status));
    }
    if (calls)
      for (std::size_t k = 0; k < calls->calls.size(); ++k) {  // each call an item: added, its arguments, done
        const auto index = static_cast<std::int64_t>(output.size());
        const infer::ToolCall& call = calls->calls[k];
        out += emit("response.output_item.added",
                    ev("response.output_item.added").add("output_index", index).add("item", function_call(k, call, "in_progress", false)));
        out += emit("response.function_call_arguments.delta", ev("response.function_call_arguments.delta")
                                                                  .add("item_id", call_item(k)).add("output_index", index).add("delta", call.arguments));
        out += emit("response.function_call_arguments.done", ev("response.function_call_arguments.done")
                                                                 .add("item_id", call_item(k)).add("output_index", index)
                                                                 .add("name", call.name).add("arguments", call.arguments));
        out += emit("response.output_item.done",
                    ev("response.output_item.done").add("output_index", index).add("item", function_call(k, call, "completed", true)));
        output.push_back(function_call(k, call, "completed", true));
      }
    const cli::JsonObject whole = response(status, output, &usage, cut);
    keep(text_, calls ? &*calls : nullptr, whole.str());
    return out + emit(last, ev(last).add("response", whole));
  }

 private:
  // A stored response: its conversation (the request's, then its output as the chat's
  // assistant message) and the response object.
  void keep(const std::string& text, const infer::ParsedReply* calls, std::string response_json) const {
    if (!store_) return;
    infer::Json reply = {{"role", "assistant"}, {"content", text}};
    if (calls) {
      if (text.empty()) reply["content"] = nullptr;
      infer::Json list = infer::Json::array();
      for (std::size_t k = 0; k < calls->calls.size(); ++k)
        list.push_back(infer::Json{{"id", call_id(k)}, {"type", "function"},
                                   {"function", {{"name", calls->calls[k].name}, {"arguments", calls->calls[k].arguments}}}});
      reply["tool_calls"] = std::move(list);
    }
    infer::Json conversation = r_.conversation;
    conversation.push_back(std::move(reply));
    store_->put(id_, conversation, std::move(response_json));
  }
  std::string open_message() {
    if (message_open_) return {};
    message_open_ = true;
    std::string out = emit("response.output_item.added", ev("response.output_item.added").add("output_index", 0).add("item", message_head("in_progress", {})));
    return out + emit("response.content_part.added", at_place(ev("response.content_part.added")).add("part", part("")));
  }
  std::string text_delta(const std::string& text) {
    if (text.empty()) return {};
    text_ += text;
    return emit("response.output_text.delta",
                at_place(ev("response.output_text.delta")).add("delta", text).add("logprobs", std::vector<cli::JsonObject>{}));
  }
  static cli::JsonObject part(const std::string& text) {
    return cli::JsonObject().add("type", "output_text").add("text", text).add("annotations", std::vector<cli::JsonObject>{});
  }
  cli::JsonObject message_head(const char* status, const std::vector<cli::JsonObject>& content) const {
    return cli::JsonObject().add("type", "message").add("id", item_).add("status", status).add("role", "assistant").add("content", content);
  }
  cli::JsonObject message(const std::string& text, const char* status) const { return message_head(status, {part(text)}); }
  std::string call_item(std::size_t k) const { return "fc_" + id_.substr(5) + "_" + std::to_string(k); }
  std::string call_id(std::size_t k) const { return "call_" + id_.substr(5) + "_" + std::to_string(k); }
  cli::JsonObject function_call(std::size_t k, const infer::ToolCall& call, const char* status, bool with_arguments) const {
    return cli::JsonObject()
        .add("type", "function_call")
        .add("id", call_item(k))
        .add("call_id", call_id(k))
        .add("name", call.name)
        .add("arguments", with_arguments ? call.arguments : std::string())
        .add("status", status);
  }
  cli::JsonObject& at_place(cli::JsonObject&& o) const { return o.add("item_id", item_).add("output_index", 0).add("content_index", 0); }
  cli::JsonObject response(const char* status, const std::vector<cli::JsonObject>& output, const Usage* usage, bool cut) const {
    cli::JsonObject o;
    o.add("id", id_).add("object", "response").add("created_at", static_cast<std::int64_t>(created_)).add("status", status).add_null("error");
    if (cut) o.add("incomplete_details", cli::JsonObject().add("reason", "max_output_tokens"));
    else o.add_null("incomplete_details");
    if (r_.instructions) o.add("instructions", *r_.instructions);
    else o.add_null("instructions");
    if (r_.max_output_tokens) o.add("max_output_tokens", *r_.max_output_tokens);
    else o.add_null("max_output_tokens");
    o.add("model", model_).add("output", output).add("parallel_tool_calls", true);
    if (r_.previous) o.add("previous_response_id", *r_.previous);
    else o.add_null("previous_response_id");
    o.add("reasoning", cli::JsonObject().add_null("effort").add_null("summary")).add("store", r_.store);
    o.add("temperature", r_.temperature).add_json("text", "{\"format\": " + (r_.format.is_null() ? std::string("{\"type\": \"text\"}") : r_.format.dump()) + "}");
    o.add_json("tool_choice", r_.tool_choice.dump()).add_json("tools", r_.tools.dump()).add("top_p", r_.top_p).add("truncation", "disabled");
    if (usage) o.add("usage", usage_object(*usage));
    else o.add_null("usage");
    return o.add_null("user").add("metadata", cli::JsonObject());
  }
  // An event's object, numbered in the order sent, and the event as server-sent.
  cli::JsonObject ev(const char* type) { return cli::JsonObject().add("type", type).add("sequence_number", sequence_++); }
  static std::string emit(const char* type, const cli::JsonObject& o) { return std::string("event: ") + type + "\n" + sse(o.str()); }

  ResponsesRequest r_;
  std::string id_, item_, model_;
  std::time_t created_;
  infer::ToolSyntax syntax_;
  ResponseStore* store_;  // null: not stored
  std::string text_;     // the message's text streamed so far
  HeldText held_;        // with tools: text that may still be a call
  bool message_open_ = false;
  std::string finish_;  // why the stream's reply ended
  std::int64_t sequence_ = 0;
};

}  // namespace

ResponsesRequest read_responses_request(const std::string& body, ResponseStore& stored) {
  const Json j = read_body(body);
  refuse_unsupported(j);
  ResponsesRequest r;
  Json chat = Json::object();
  if (const Json* v = infer::json_field(j, "store"); given(v)) {
    if (!v->is_boolean()) throw bad("store", "\"store\" must be true or false");
    r.store = v->get<bool>();
  }
  r.conversation = conversation_of(j, r, stored);
  Json messages = Json::array();
  if (const Json* ins = infer::json_field(j, "instructions"); given(ins)) {
    if (!ins->is_string()) throw bad("instructions", "\"instructions\" must be a string");
    r.instructions = ins->get<std::string>();
    messages.push_back(Json{{"role", "system"}, {"content", *r.instructions}});
  }
  for (const Json& m : r.conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  tools_of(j, r, chat);
  for (const char* key : {"model", "temperature", "top_p", "stream", "seed", "user"})
    if (const Json* v = infer::json_field(j, key); given(v)) chat[key] = *v;
  if (const Json* v = infer::json_field(j, "max_output_tokens"); given(v)) {
    if (!v->is_number() || !(v->get<double>() >= 1 && v->get<double>() <= (1 << 20)) || v->get<double>() != std::floor(v->get<double>()))
      throw bad("max_output_tokens", "\"max_output_tokens\" must be an integer in [1, 1048576]");
    r.max_output_tokens = static_cast<std::int64_t>(v->get<double>());
    chat["max_tokens"] = *r.max_output_tokens;
  }
  if (const Json* v = infer::json_field(j, "temperature"); given(v) && v->is_number()) r.temperature = v->get<double>();
  if (const Json* v = infer::json_field(j, "top_p"); given(v) && v->is_number()) r.top_p = v->get<double>();
  // text.format: the Responses API's flat {"type": "json_schema", "name", "schema", "strict"}
  // is the chat's response_format {"type": "json_schema", "json_schema": {...}}.
  if (const Json* t = infer::json_field(j, "text"); given(t))
    if (const Json* f = infer::json_field(*t, "format"); given(f)) {
      r.format = *f;
      if (*infer::json_string(*f, "type") == "json_schema") {
        Json inner = *f;
        inner.erase("type");
        chat["response_format"] = Json{{"type", "json_schema"}, {"json_schema", inner}};
      } else {
        chat["response_format"] = *f;
      }
    }
  r.chat_body = chat.dump();
  return r;
}

std::shared_ptr<ReplyFormat> make_responses_reply(const ResponsesRequest& r, std::uint64_t id, const std::string& model,
                                                  infer::ToolSyntax syntax, ResponseStore* store) {
  return std::make_shared<ResponsesReply>(r, id, model, syntax, store);
}

std::string response_id(std::uint64_t id) { return "resp_" + std::to_string(id); }

}  // namespace ringattn::serve
