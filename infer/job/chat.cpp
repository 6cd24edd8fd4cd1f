// infer — a model's chat format (chat.hpp).
#include "chat.hpp"

#include <ringattn/error.hpp>

#include <filesystem>
#include <stdexcept>

#include "../common/digest.hpp"
#include "../formats/gguf.hpp"
#include "../common/input_file.hpp"
#include "model_files.hpp"
#include "options.hpp"

namespace infer {

namespace {

namespace fs = std::filesystem;

// Parses `source` into `c`, or keeps why it cannot be rendered.
void take(ModelChat& c, std::string source, const std::string& where) {
  Fnv1a h;
  h.bytes(source.data(), source.size());
  c.digest = h.h;
  c.tools = tool_syntax_of(source);
  try {
    c.tmpl = ChatTemplate::parse(std::move(source), where);
  } catch (const ringattn::FileError& e) {
    c.refused = std::string(e.what()) + ": this runtime cannot render the model's chat template (completions still work)";
  }
}

// From a model's directory (`dir`): chat_template.jinja if present, else the template in
// tokenizer_config.json (`config`, read already; null: there is none), whose special tokens
// are read either way.
void from_config(ModelChat& c, const fs::path& dir, const JsonMapFile* config) {
  const fs::path jinja = dir / "chat_template.jinja";
  if (fs::exists(jinja)) {
    const std::vector<char> bytes = read_input_file(jinja.string(), 1u << 20, "chat template");
    take(c, std::string(bytes.begin(), bytes.end()), jinja.string());
  }
  if (config == nullptr) {
    if (!c.tmpl && c.refused.empty()) c.refused = "the model has no chat template (no " + (dir / "tokenizer_config.json").string() + ")";
    return;
  }
  const JsonMap& j = config->json;
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    const JsonMap* v = json_field(j, k);
    if (v && v->is_object()) v = json_field(*v, "content");
    if (v && v->is_string()) c.special_tokens[k] = v->get<std::string>();
  }
  if (c.tmpl || !c.refused.empty()) return;  // chat_template.jinja wins, as in transformers
  const JsonMap* t = json_field(j, "chat_template");
  if (t && t->is_array()) {  // named templates: the default one
    const JsonMap* chosen = nullptr;
    for (const JsonMap& x : *t)
      if (const JsonMap* n = json_field(x, "name"); n && n->is_string() && n->get<std::string>() == "default") chosen = json_field(x, "template");
    t = chosen;
  }
  if (t && t->is_string()) take(c, t->get<std::string>(), config->path);
  else c.refused = "the model has no chat template (" + config->path + " has no \"chat_template\")";
}

}  // namespace

std::string ModelChat::render(const Json& messages, const Json& tools, const RenderLimits& limits) const {
  if (!tmpl) throw std::runtime_error(refused);
  Json context = special_tokens;
  context["messages"] = messages;
  context["tools"] = tools;
  context["add_generation_prompt"] = true;
  return tmpl->render(context, limits);
}

ModelChat load_chat(const JobOptions& opt, ModelFiles& files) {
  ModelChat c;
  if (files.tokenizer_dir()) {  // --tokenizer FILE.json's directory, else the Hugging Face directory
    from_config(c, *files.tokenizer_dir(), files.tokenizer_config());
  } else if (!opt.tokenizer.empty()) {
    c.refused = "the model has no chat template (llama2.c's tokenizer " + opt.tokenizer + " has none)";
  } else if (!opt.gguf.empty()) {
    const GgufFile& f = files.gguf();
    const std::vector<std::string>* tokens = f.strings("tokenizer.ggml.tokens");
    const auto n = tokens ? static_cast<std::int64_t>(tokens->size()) : 0;
    for (const auto& [key, name] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"}, {"tokenizer.ggml.eos_token_id", "eos_token"},
                                   {"tokenizer.ggml.unknown_token_id", "unk_token"}, {"tokenizer.ggml.padding_token_id", "pad_token"}})
      if (n > 0)
        if (const auto id = f.integer(key, 0, n - 1)) c.special_tokens[name] = (*tokens)[static_cast<std::size_t>(*id)];
    if (const auto t = f.string("tokenizer.chat_template")) take(c, *t, opt.gguf + " (tokenizer.chat_template)");
    else c.refused = "the model has no chat template (" + opt.gguf + " has no tokenizer.chat_template)";
  } else {
    c.refused = "the model has no chat template";
  }
  Fnv1a h;
  h.value(c.digest);
  const std::string tokens = c.special_tokens.dump();
  h.bytes(tokens.data(), tokens.size());
  c.digest = h.h;
  return c;
}

}  // namespace infer
