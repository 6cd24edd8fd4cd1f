// infer — a model's chat template (tokenizer_config.json's "chat_template", a GGUF file's
// tokenizer.chat_template): the Jinja text that turns a list of messages into the prompt the
// model was trained on, rendered as transformers' apply_chat_template renders it (Jinja 3 with
// trim_blocks and lstrip_blocks, a single trailing newline dropped, loop controls, its tojson
// (json.dumps, non-ASCII kept, keys in order) and raise_exception).
//
// What is implemented is the part of Jinja real chat templates use (Llama 3's, Qwen's...):
// text; {{ expr }}; {% if/elif/else %}, {% for x in xs [if c] %} with loop.index, index0,
// first, last, length, revindex, revindex0, and {% else %}, {% break %}, {% continue %};
// {% set x = e %} (scoped to the loop body it is in, as Jinja) and {% set ns.a = e %} on a
// namespace(); comments; whitespace control with - and +. Expressions: literals (strings,
// integers, floats, true/false/none, lists, dicts), names, .attr, [i], slices, a if c else b,
// not/and/or, comparisons, in/not in, + - * / // % ~, filters (trim, length, count, tojson,
// string, lower, upper, first, last, join, default, list, items, capitalize, title, replace,
// int), tests (defined, undefined, none, string, number, integer, mapping, iterable, sequence,
// true, false, boolean, eq, equalto...), string methods (startswith, endswith, split, strip,
// lstrip, rstrip, replace, lower, upper, title, capitalize), dict methods (items, keys,
// values, get), the globals namespace(), raise_exception(), range() and strftime_now(), and
// tojson's indent.
//
// Anything else (macros, call blocks, extends/include, unknown filters, tests, methods or
// functions) is refused when the template is parsed, naming the line: a template this runtime
// cannot render is never replaced by another.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "../common/json.hpp"

namespace infer {

namespace jinja {
struct Node;
}

// The bounds of one render. A template comes from a model file and its context from a client,
// so neither may decide how long a render takes or how much memory it holds: every value is
// read by reference (a loop over `messages` that reads `messages|length` each time costs
// nothing per read), and what a render makes and touches is counted. Each bound, when passed,
// ends the render with an error naming the template and the line.
struct RenderLimits {
  std::size_t output_bytes = 16u << 20;       // the text rendered
  std::size_t value_size = 16u << 20;         // bytes of any one string, items of any one list
  std::uint64_t made_bytes = 256ull << 20;    // bytes of every string, list and dict made, summed over
                                              // the render (its peak memory stays below this)
  std::uint64_t work_bytes = 2ull << 30;      // bytes made, copied, compared or searched, summed
  std::uint64_t steps = 5'000'000;            // statements and expressions evaluated
  std::chrono::milliseconds time{10'000};     // wall time from the render's start
};

// What a render used (for tests and logs): linear templates use work linear in their input.
struct RenderStats {
  std::uint64_t steps = 0;
  std::uint64_t made_bytes = 0;
  std::uint64_t work_bytes = 0;
};

class ChatTemplate {
 public:
  // Throws ringattn::FileError "chat template <where>: line N: ..." for a template this
  // parser cannot render exactly (bounded: at most 256 KiB, nesting 64 deep).
  static ChatTemplate parse(std::string source, const std::string& where);
  // The text for `context` (an object: messages, add_generation_prompt, bos_token, ...).
  // Throws std::runtime_error naming the template and line for what fails while rendering
  // (raise_exception's message, a type error) and for a render past `limits`.
  std::string render(const Json& context, const RenderLimits& limits = {}, RenderStats* stats = nullptr) const;
  const std::string& where() const { return where_; }

 private:
  std::shared_ptr<const std::vector<jinja::Node>> body_;
  std::string where_;
};

}  // namespace infer
