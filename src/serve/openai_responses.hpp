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
// Nothing is stored (`store` is accepted either way and nothing is kept: there is no GET
// /v1/responses/ID); what asks for what is not here — previous_response_id, background,
// tools, reasoning, include, input items other than
// messages, parts other than text — is 400 naming it (code unsupported_parameter).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "../../infer/common/json.hpp"
#include "openai_reply.hpp"

namespace ringattn::serve {

struct ResponsesRequest {
  std::string chat_body;  // the equivalent chat completion request's body
  std::optional<std::string> instructions;
  std::optional<std::int64_t> max_output_tokens;
  double temperature = 1, top_p = 1;
  infer::Json format = nullptr;  // text.format as given (echoed); null: text
};

// Throws ApiError (openai_request.hpp) naming the field at fault.
ResponsesRequest read_responses_request(const std::string& body);
std::shared_ptr<ReplyFormat> make_responses_reply(const ResponsesRequest& r, std::uint64_t id, const std::string& model);

}  // namespace ringattn::serve
