// ringattn serve — OpenAI's request parameters the endpoint does not implement (yet). Each is
// answered 400 {"param": NAME, "code": "unsupported_parameter"} instead of a 200 that
// silently ignores it, unless its value is the parameter's default — what OpenAI's clients
// send when the user set nothing, which changes nothing. null is always the same as absent.
// One table for /v1/completions and /v1/chat/completions (a parameter of either endpoint is
// judged on both); docs/daemons.md lists it. Parameters OpenAI documents for neither are
// still ignored, as before.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "../../infer/common/json.hpp"

namespace ringattn::serve {

struct UnimplementedParameter {
  const char* name;
  // The values taken as the default, as JSON texts (compared as JSON: 0 is 0.0).
  std::vector<const char*> defaults;
};

// The table, in the order requests are checked.
const std::vector<UnimplementedParameter>& unimplemented_parameters();

struct UnsupportedParameter {
  std::string name;     // the request's field: the error's "param"
  std::string message;  // names it and what is accepted
};

// The first parameter of `request` (a JSON object) given with a value the endpoint would
// ignore; nullopt when every one it has is absent, null or a default. `chat`: the request is
// a chat completion, whose "tools" go to the model's chat template (and "tool_choice":
// "none" beside tools is then refused: the template offers them to the model).
std::optional<UnsupportedParameter> unsupported_parameter(const infer::Json& request, bool chat);

}  // namespace ringattn::serve
