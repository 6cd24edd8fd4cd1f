// A chat template's render within its bounds (infer/chat_templates/chat_template.hpp RenderLimits): what a
// hostile tester sent — a template that copies a 16 MB string into lists of lists, strings
// grown in loops, splits and lists of a 16 MB string, a conversation of thousands of messages
// read by a Qwen-style template — is refused naming the template and line before it takes the
// memory, or renders in work linear in its input. Asserted through the render's own counts
// (RenderStats), never through timings.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "infer/chat_templates/chat_template.hpp"
#include "infer/common/json.hpp"
#include "tests/error_of.hpp"

namespace {

using infer::ChatTemplate;
using infer::Json;
using infer::RenderLimits;
using infer::RenderStats;

struct Rendered {
  std::string text, error;
  RenderStats stats;
};

Rendered render(const std::string& source, const Json& context = Json::object(), const RenderLimits& limits = {}) {
  Rendered r;
  const ChatTemplate t = ChatTemplate::parse(source, "hostile.jinja");
  try {
    r.text = t.render(context, limits, &r.stats);
  } catch (const std::runtime_error& e) {
    r.error = e.what();
  }
  return r;
}

constexpr std::uint64_t kMiB = 1 << 20;

// A conversation of n tool results after one question, as the tester sent Qwen 3.
Json tool_conversation(int n) {
  Json m = Json::array();
  m.push_back({{"role", "user"}, {"content", "What is the weather in these cities?"}});
  for (int i = 0; i < n; ++i) m.push_back({{"role", "tool"}, {"content", "<tool_response>city " + std::to_string(i) + ": 21 C</tool_response>"}});
  return Json{{"messages", m}, {"add_generation_prompt", true}};
}

// Qwen 3's own shape: a reverse pass that reads messages|length and messages[i] for every
// message, then a pass that looks at the previous and next message of each. Copying every
// value read made this quadratic (1k/2k/4k/8k messages: 1.2/2.5/7.5/28.4 s).
const char* kQwenShape = R"({%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
{%- set index = (messages|length - 1) - loop.index0 %}
{%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
{%- set ns.multi_step_tool = false %}
{%- set ns.last_query_index = index %}
{%- endif %}
{%- endfor %}
{%- for message in messages %}
{%- if message.role == "tool" %}
{%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}<|im_start|>user{% endif %}
<tool_response>{{ message.content }}</tool_response>
{%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}<|im_end|>{% endif %}
{%- else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %})";

}  // namespace

TEST_CASE("chat template limits: a template reading the whole conversation per message renders in work linear in the messages") {
  const Rendered small = render(kQwenShape, tool_conversation(1000));
  const Rendered large = render(kQwenShape, tool_conversation(8000));
  REQUIRE_MESSAGE(small.error.empty(), small.error);
  REQUIRE_MESSAGE(large.error.empty(), large.error);
  CHECK(large.text.size() > 7 * small.text.size());
  // 8 times the messages: 8 times the steps and bytes touched (a copy per read made the
  // bytes grow 64-fold), within a margin for the fixed parts.
  CHECK(static_cast<double>(large.stats.steps) < 8.5 * static_cast<double>(small.stats.steps));
  CHECK(static_cast<double>(large.stats.work_bytes) < 8.5 * static_cast<double>(small.stats.work_bytes));
  CHECK(static_cast<double>(large.stats.made_bytes) < 8.5 * static_cast<double>(small.stats.made_bytes));
  // And little per message: nothing near the conversation's size is copied for each one.
  CHECK(large.stats.work_bytes < 64 * large.text.size());
}

TEST_CASE("chat template limits: a 16 MB string copied into lists of lists is refused before the copy, naming the template and line") {
  // The tester's 114-byte template peaked at 3.3 GB; 10 x 10 x 10 passed 6 GB and died of
  // std::bad_alloc naming nothing.
  for (const char* source : {"{% set s = 'x' * 16000000 %}{% set a = [s,s,s,s,s,s,s,s,s,s] %}\n{% set b = [a,a,a,a,a,a,a,a,a,a] %}{{ b|length }}",
                             "{% set s = 'x' * 16000000 %}{% set a = [s,s,s,s,s,s,s,s,s,s] %}\n{% set b = [a,a,a,a,a,a,a,a,a,a] %}"
                             "{% set c = [b,b,b,b,b,b,b,b,b,b] %}{{ c|length }}"}) {
    CAPTURE(source);
    const Rendered r = render(source);
    CHECK(r.error.find("chat template hostile.jinja: line 2: makes more than 256 MiB") != std::string::npos);
    CHECK(r.stats.made_bytes <= RenderLimits{}.made_bytes + 16 * kMiB);  // refused before, not after
  }
  // A limit lowered by the caller (the daemon's 64 MiB) is the one kept.
  RenderLimits daemon;
  daemon.made_bytes = 64 * kMiB;
  const Rendered r = render("{% set s = 'x' * 16000000 %}{% set a = [s,s,s,s,s,s,s,s,s,s] %}{{ a|length }}", Json::object(), daemon);
  CHECK(r.error.find("line 1: makes more than 64 MiB") != std::string::npos);
  CHECK(r.stats.made_bytes <= 80 * kMiB);
}

TEST_CASE("chat template limits: splitting, listing or walking a 16 MB string is refused before the list is made") {
  const std::pair<const char*, const char*> cases[] = {
      {"{% set s = 'a ' * 8000000 %}{{ s.split()|length }}", "makes more than 256 MiB"},
      {"{% set s = 'a,' * 8000000 %}{{ s.split(',')|length }}", "makes more than 256 MiB"},
      {"{% set s = 'x' * 16000000 %}{{ (s|list)|length }}", "makes more than 256 MiB"},
      {"{% set s = 'x' * 16000000 %}{% for c in s %}{% endfor %}", "runs more than 5 million steps"},
      {"{% set s = 'x' * 16000000 %}{% for c in s if c == 'y' %}{% endfor %}", "runs more than 5 million steps"},
  };
  for (const auto& [source, want] : cases) {
    CAPTURE(source);
    const Rendered r = render(source);
    INFO(r.error);
    CHECK(r.error.find(want) != std::string::npos);
    CHECK(r.error.find("hostile.jinja: line 1") != std::string::npos);
    CHECK(r.stats.made_bytes <= RenderLimits{}.made_bytes + 16 * kMiB);
  }
}

TEST_CASE("chat template limits: reading a large value many times costs nothing per read; growing or searching it is bounded") {
  // 50 000 reads of a 16 MB variable took 25 s when every read copied it.
  const Rendered reads = render("{% set s = 'x' * 16000000 %}{% for i in range(50000) %}{% set t = s %}{% if s %}{% endif %}"
                                "{% if t is string %}{% endif %}{% endfor %}{{ s|length }}");
  REQUIRE_MESSAGE(reads.error.empty(), reads.error);
  CHECK(reads.text == "16000000");
  CHECK(reads.stats.made_bytes < 20 * kMiB);  // the string once, a loop variable per step
  // A string grown by ~ in a loop (24 s at 50k iterations, 156 s at 100k): refused by what
  // it makes, long before the steps run out.
  const Rendered grown = render("{% set ns = namespace(s='x' * 1000000) %}\n{% for i in range(100000) %}{% set ns.s = ns.s ~ 'y' %}{% endfor %}");
  CHECK(grown.error.find("line 2: makes more than 256 MiB") != std::string::npos);
  CHECK(grown.stats.steps < 2000);
  // Searching a 16 MB string again and again: refused by the bytes searched.
  const Rendered searched = render("{% set s = 'x' * 16000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}");
  CHECK(searched.error.find("reads or makes more than 2048 MiB") != std::string::npos);
  CHECK(searched.stats.steps < 2000);
}

TEST_CASE("chat template limits: output, time and steps are bounded and their refusals name the template and line") {
  const Rendered out = render("{% set s = 'x' * 1000000 %}\n{% for i in range(20) %}{{ s }}{% endfor %}");
  CHECK(out.error.find("hostile.jinja: line 2: renders more than 16 MiB") != std::string::npos);
  // A render given no time is refused at its first step, whatever it is.
  RenderLimits none;
  none.time = std::chrono::milliseconds(0);
  const Rendered late = render("hello {{ 1 + 1 }}", Json::object(), none);
  CHECK(late.error.find("takes longer than 0 ms to render") != std::string::npos);
  // The same render with time renders.
  CHECK(render("hello {{ 1 + 1 }}").text == "hello 2");
  const Rendered steps = render("{% set r = range(100) %}{% for i in range(100000) %}{% for j in r %}{% endfor %}{% endfor %}");
  CHECK_MESSAGE(steps.error.find("runs more than 5 million steps") != std::string::npos, steps.error);
  // One string past the value limit, and a repetition that would be: refused before made.
  const Rendered big = render("{{ ('x' * 9000000) ~ ('y' * 9000000) }}");
  CHECK(big.error.find("larger than 16 Mi") != std::string::npos);
  const Rendered times = render("{{ 'xy' * 4000000000000 }}");
  CHECK(times.error.find("larger than 16 Mi") != std::string::npos);
  CHECK(times.stats.made_bytes < kMiB);
}

TEST_CASE("chat template limits: errors quote a long value briefly") {
  const Rendered r = render("{% set s = 'x' * 1000000 %}{{ s - 1 }}");
  REQUIRE(!r.error.empty());
  CHECK(r.error.size() < 1000);
  CHECK(r.error.find("a string of 1000000 bytes") != std::string::npos);
}

TEST_CASE("chat template limits: searches are linear in the text and the pattern, whatever the pattern") {
  // A long needle of a's in a longer text of a's: std::string::find compares naively (about
  // 6e13 byte compares here, hours); the two-way search is linear. Were it not, this test
  // would run into its time limit rather than pass.
  const Rendered in = render("{% set t = 'a' * 16000000 %}{% set n = ('a' * 8000000) ~ 'b' %}{{ n in t }} {{ t.split(n)|length }} "
                             "{{ t.replace(n, 'x')|length }}");
  REQUIRE_MESSAGE(in.error.empty(), in.error);
  CHECK(in.text == "False 1 16000000");
  // strip's characters: a binary search per character, not a walk of a 4 MB set.
  const Rendered trimmed = render("{{ ('a' * 4000000)|trim(('b' * 4000000) ~ 'a')|length }}");
  REQUIRE_MESSAGE(trimmed.error.empty(), trimmed.error);
  CHECK(trimmed.text == "0");
}

TEST_CASE("chat template limits: loop is read by its attributes; used as a list or a value it is refused or undefined, never read") {
  CHECK(render("{% for x in [1, 2] %}{{ loop.index }}{{ loop['last'] }}{{ loop[0] is defined }}{% endfor %}").text == "1FalseFalse2TrueFalse");
  const Rendered walked = render("{% for x in [1] %}{% for y in loop %}{% endfor %}{% endfor %}");
  CHECK(walked.error.find("a loop is not iterable") != std::string::npos);
  CHECK(render("{% for x in [1] %}{{ loop }}{% endfor %}").error.find("a loop cannot be printed") != std::string::npos);
  CHECK(render("{% for x in [1, 2, 3] %}{{ loop|length }}{% endfor %}").text == "333");  // (LoopContext's len())
  CHECK(render("{% for x in [1] %}{{ loop + 1 }}{% endfor %}").error.find("a loop is used as a value") != std::string::npos);
}
