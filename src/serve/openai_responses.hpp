// ringattn serve — POST /v1/responses, OpenAI's Responses API, by conversion to a chat
// completion (as llama.cpp's server does): `input` (a text, or messages whose content is a
// text or input_text/output_text parts; "developer" is the system role) after
// `instructions` (a system message) become the chat's messages, `max_output_tokens` its
// max_tokens, `text.format` (json_object, json_schema) its response_format, `temperature`,
// `top_p` and `stream` pass; the reply is a response object
// (output: one assistant message of output_text; usage in input/output tokens; status
// "incomplete" with reason max_output_tokens when cut) or, streamed, the Responses API's
// events (response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta..., response.output_text.done,
// response.content_part.done, response.output_item.done, response.completed or
// response.incomplete), each `event: TYPE` with its JSON and a sequence_number.
//
// Tools: `tools` of type "function" (the Responses API's flat {"type", "name", "description",
// "parameters", "strict"}) and `tool_choice` (auto, none, required, {"type": "function",
// "name"}) become the chat's; input items "function_call" (a call the model made: call_id,
// name, arguments) and "function_call_output" (its result: call_id, output) become the
// chat's assistant tool_calls and tool messages. A reply that calls a tool answers
// "function_call" output items (id, call_id, name, arguments), streamed as
// response.output_item.added, response.function_call_arguments.delta and .done,
// response.output_item.done once the held-back text is a call.
//
// `store` (true by default, as OpenAI's): the response is kept (response_store.hpp), and a
// later request's `previous_response_id` goes on from its conversation (its instructions are
// not carried over, as OpenAI's are not; an id not stored is 400 previous_response_not_found);
// GET and DELETE /v1/responses/ID read and remove one. What asks for what is not here —
// background, tools of other types (web_search, file_search, computer use, MCP...),
// reasoning, include, input items of other types, parts other than text — is 400 naming it
// (code unsupported_parameter).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "../../infer/common/json.hpp"
#include "../../infer/job/tool_calls.hpp"
#include "openai_reply.hpp"
#include "response_store.hpp"

namespace ringattn::serve {

struct ResponsesRequest {
  std::string chat_body;  // the equivalent chat completion request's body
  std::optional<std::string> instructions;
  std::optional<std::int64_t> max_output_tokens;
  double temperature = 1, top_p = 1;
  infer::Json format = nullptr;  // text.format as given (echoed); null: text
  infer::Json tools = infer::Json::array();  // as given (echoed)
  infer::Json tool_choice = "auto";          // as given (echoed)
  bool store = true;
  std::optional<std::string> previous;              // previous_response_id
  infer::Json conversation = infer::Json::array();  // its chat messages but the instructions: what a stored response keeps
};

// Throws ApiError (openai_request.hpp) naming the field at fault. `stored`: where a
// previous_response_id is looked up.
ResponsesRequest read_responses_request(const std::string& body, ResponseStore& stored);
// `syntax`: how the model's reply calls the tools offered (Asked::tool_syntax; none: no
// tools). `store`: where the response goes once whole (null: r.store is false).
std::shared_ptr<ReplyFormat> make_responses_reply(const ResponsesRequest& r, std::uint64_t id, const std::string& model,
                                                  infer::ToolSyntax syntax, ResponseStore* store);
// The id a response of generation `id` answers with.
std::string response_id(std::uint64_t id);

}  // namespace ringattn::serve
