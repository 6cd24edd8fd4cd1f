// libFuzzer target for chat templates (infer/chat_template_*.cpp): any input is a template. It
// must parse or throw FileError; a parsed one must render a fixed conversation (with tool calls,
// Unicode, an undefined field) or throw std::runtime_error, within the renderer's bounds (a
// crash, sanitizer report, other exception, runaway allocation or time is a bug: run with a
// memory and a time limit, below).
//
//   ./build-fuzz/tests/fuzz/fuzz_chat_template -max_total_time=60 -rss_limit_mb=1024 -timeout=10 tests/fuzz/corpus/chat_template
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "infer/chat_templates/chat_template.hpp"
#include "ringattn/error.hpp"

namespace {

const infer::Json& context() {
  static const infer::Json c = infer::parse_json(R"({
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "tools": null,
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Wéather in Paris? 🙂 {{ x }}"},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nok", "tool_calls": [
        {"type": "function", "function": {"name": "w", "arguments": {"city": "Paris", "n": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "21"},
      {"role": "user", "content": "  thanks  "}]})");
  return c;
}

// Bounds well under the fuzzer's own (-rss_limit_mb, -timeout in deploy/test.sh): a template
// that gets past them is a bug in the renderer's accounting, and the fuzzer reports it.
const infer::RenderLimits& limits() {
  static const infer::RenderLimits l = [] {
    infer::RenderLimits x;
    x.made_bytes = 64u << 20;
    x.work_bytes = 256u << 20;
    x.time = std::chrono::milliseconds(2000);
    return x;
  }();
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    const infer::ChatTemplate t = infer::ChatTemplate::parse(source, "fuzz");
    try {
      (void)t.render(context(), limits());
    } catch (const ringattn::Error&) {
      std::abort();  // rendering fails with runtime_error only
    } catch (const std::runtime_error&) {
    }
  } catch (const ringattn::FileError&) {
  }
  return 0;
}
