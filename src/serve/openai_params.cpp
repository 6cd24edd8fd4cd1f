// ringattn serve — OpenAI's parameters the endpoint does not implement (openai_params.hpp).
#include "openai_params.hpp"

namespace ringattn::serve {

const std::vector<UnimplementedParameter>& unimplemented_parameters() {
  // Each with the values that ask for nothing: OpenAI's default, and the empty value of its
  // type where that is the same ({} for a bias, [] for tools).
  static const std::vector<UnimplementedParameter> table = {
      {"echo", {"false"}},
      {"best_of", {"1"}},
      {"suffix", {"\"\""}},
      {"tools", {"[]"}},  // completions only: a chat's go to its template
      {"tool_choice", {"\"auto\"", "\"none\""}},  // completions only: a chat's is read with its tools
      {"parallel_tool_calls", {"true"}},
      {"functions", {"[]"}},
      {"function_call", {"\"auto\"", "\"none\""}},
      {"store", {"false"}},
      {"metadata", {"{}"}},
      {"service_tier", {"\"auto\"", "\"default\""}},
      {"modalities", {"[\"text\"]"}},
      {"audio", {}},
      {"prediction", {}},
      {"reasoning_effort", {}},
      {"verbosity", {"\"medium\""}},
      {"web_search_options", {}},
  };
  return table;
}

namespace {

bool given(const infer::Json* v) { return v != nullptr && !v->is_null(); }

std::string accepted_text(const UnimplementedParameter& p) {
  std::string s;
  for (const char* d : p.defaults) s += std::string(s.empty() ? "" : " or ") + infer::parse_json(d).dump();
  return s.empty() ? "null (absent)" : s + " (its default), or null";
}

}  // namespace

std::optional<UnsupportedParameter> unsupported_parameter(const infer::Json& request, bool chat) {
  for (const UnimplementedParameter& p : unimplemented_parameters()) {
    if (chat && (std::string_view(p.name) == "tools" || std::string_view(p.name) == "tool_choice")) continue;
    const infer::Json* v = infer::json_field(request, p.name);
    if (!given(v)) continue;
    bool is_default = false;
    for (const char* d : p.defaults) is_default = is_default || *v == infer::parse_json(d);
    if (!is_default) {
      std::string message = "\"";  // (built in steps: GCC 12's -Wrestrict misreads "\"" + string)
      message.append(p.name).append("\" is not supported by this endpoint: it accepts only ").append(accepted_text(p));
      return UnsupportedParameter{p.name, std::move(message)};
    }
  }
  return std::nullopt;
}

}  // namespace ringattn::serve
