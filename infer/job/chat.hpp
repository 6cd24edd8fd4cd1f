// infer — a model's chat format: its chat template (chat_template.hpp) and the special-token
// texts the template reads, from the files the model came with. Messages become a prompt's
// text here, which the model's tokenizer then encodes without adding its own BOS (the
// template writes it), as transformers' apply_chat_template(tokenize=True) does.
//
// Where the template comes from: --tokenizer FILE.json: the tokenizer_config.json beside it;
// a Hugging Face directory: chat_template.jinja if present, else tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template} of which "default"); a GGUF file:
// tokenizer.chat_template. llama2.c's files have none. A template this runtime cannot render
// is kept as the reason (`refused`), never replaced: every chat request is refused with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "../chat_templates/chat_template.hpp"
#include "../common/json.hpp"
#include "tool_calls.hpp"

namespace infer {

class ModelFiles;
struct JobOptions;

struct ModelChat {
  std::optional<ChatTemplate> tmpl;
  std::string refused;      // without a template: why ("... has no chat template", the parse error)
  Json special_tokens = Json::object();  // bos_token, eos_token, unk_token, pad_token: their texts
  std::uint64_t digest = 0;               // of the template's source and the token texts
  ToolSyntax tools = ToolSyntax::none;    // how the template teaches the model to call tools (tool_calls.hpp)

  // The prompt text for `messages` (an array of {role, content, ...} objects as a client sends
  // them) with the assistant's turn opened; `tools` as given (null: none). Throws
  // std::runtime_error with `refused` without a template, or the renderer's error (also for a
  // render past `limits`: chat_template.hpp).
  std::string render(const Json& messages, const Json& tools = nullptr, const RenderLimits& limits = {}) const;
};

// The chat format of the model `opt` names, from its files as `files` opened them
// (model_files.hpp). Throws ringattn::FileError for a config file that is there but
// unreadable or not JSON.
ModelChat load_chat(const JobOptions& opt, ModelFiles& files);

}  // namespace infer
