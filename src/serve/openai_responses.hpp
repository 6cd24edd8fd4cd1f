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
// Nothing is stored (`store` is accepted either way and nothing is kept: there is no GET
// /v1/responses/ID); what asks for what is not here — previous_response_id, background,
// tools of other types (web_search, file_search, computer use, MCP...), reasoning, include,
// input items of other types, parts other than text — is 400 naming it (code
// unsupported_parameter).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "../../infer/common/json.hpp"
#include "../../infer/job/tool_calls.hpp"
#include "openai_reply.hpp"

namespace ringattn::serve {

struct ResponsesRequest {
  std::string chat_body;  // the equivalent chat completion request's body
  std::optional<std::string> instructions;
  std::optional<std::int64_t> max_output_tokens;
  double temperature = 1, top_p = 1;
  infer::Json format = nullptr;  // text.format as given (echoed); null: text
  infer::Json tools = infer::Json::array();  // as given (echoed)
  infer::Json tool_choice = "auto";          // as given (echoed)
};

// Throws ApiError (openai_request.hpp) naming the field at fault.
ResponsesRequest read_responses_request(const std::string& body);
// `syntax`: how the model's reply calls the tools offered (Asked::tool_syntax; none: no tools).
std::shared_ptr<ReplyFormat> make_responses_reply(const ResponsesRequest& r, std::uint64_t id, const std::string& model,
                                                  infer::ToolSyntax syntax);

}  // namespace ringattn::serve
