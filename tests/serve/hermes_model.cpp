// The tool-calling model and its validator (hermes_model.hpp).
#include "tests/serve/hermes_model.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/integration/hf_text_model.hpp"
#include "tests/serve/model_ring.hpp"
#include "tests/skip.hpp"

namespace ringattn::stest {
namespace {

// A Qwen-style (Hermes) chat template that offers tools and renders calls and their results,
// over the seeded directory's byte-level tokenizer (the markers are plain text to it).
const char* kHermesTemplate = R"({%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for t in tools %}
{{ t | tojson }}
{%- endfor %}
</tools>
For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.content %}{{ m.content }}{% endif %}
{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% endfor %}<|im_start|>assistant
)";

std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

HermesModel::HermesModel() : path(std::filesystem::temp_directory_path() / ("ringattn-hermes-" + std::to_string(::getpid()))) {
  std::filesystem::create_directories(path);
  ::test::hf_text::write_model(path, 7);
  infer::Json config = infer::parse_json(read_all(path / "tokenizer_config.json"));
  config["chat_template"] = kHermesTemplate;
  std::ofstream(path / "tokenizer_config.json") << config.dump(2);
}

HermesModel::~HermesModel() { std::filesystem::remove_all(path); }

void ajv_accepts(const infer::Json& cases) {
  const std::string kRun = RINGATTN_SOURCE_ROOT "/tests/constrain/ajv/run.sh";
  const Outcome install = run("/bin/bash", {kRun, "install"}, 600);
  if (install.exit_code == 77) {
    ::test::skip("ajv: " + install.err);
    return;
  }
  REQUIRE_MESSAGE(install.exit_code == 0, install.err);
  const auto dir = std::filesystem::temp_directory_path() / ("ringattn-ajv-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cases.json") << cases.dump();
  const Outcome v = run("/bin/bash", {kRun, "validate", (dir / "cases.json").string(), (dir / "report.json").string()});
  INFO("ajv: " << v.err);
  REQUIRE(v.exit_code == 0);
  const infer::Json report = infer::parse_json(read_all(dir / "report.json"));
  std::filesystem::remove_all(dir);
  INFO(report.dump());
  std::size_t outputs = 0;
  for (const auto& c : cases) outputs += c.at("outputs").size();
  CHECK(report.at("checked").get<std::size_t>() == outputs);
  CHECK(report.at("failures").empty());
}

}  // namespace ringattn::stest
