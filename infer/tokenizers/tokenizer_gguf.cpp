// infer — a GGUF file's vocabulary as a tokenizer (tokenizer_gguf.hpp).
#include "tokenizer_gguf.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "pretokenize.hpp"

namespace infer {

namespace {

// Token texts llama.cpp makes control tokens when it loads a vocabulary, whatever the file
// says (llama-vocab.cpp: its end-of-generation spellings, and the fill-in-the-middle ones,
// of which it takes the first it meets per kind: here all), and the ones it makes
// user-defined (gpt-oss). Both are then found in text like the file's own special tokens.
constexpr std::string_view kControlLooking[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>",
    "<eos>", "<turn|>", "<|tool_response>",
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>", "<|middle|>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"};
constexpr std::size_t kEndSpellings = 20;  // llama.cpp's end-of-generation tokens by text
// The fill-in-the-middle pad, repository and file-separator spellings: llama.cpp ends generation at those too.
constexpr std::string_view kFimEnds[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
                                         "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"};
constexpr std::string_view kUserDefined[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

// llama.cpp's token kinds (tokenizer.ggml.token_type), after its load-time overrides.
std::vector<int> token_kinds(const std::vector<std::string>& tokens, const std::vector<double>* types) {
  std::vector<int> kinds(tokens.size(), 1);
  if (types) std::copy(types->begin(), types->end(), kinds.begin());
  std::unordered_map<std::string_view, std::size_t> id;
  for (std::size_t i = 0; i < tokens.size(); ++i) id.emplace(tokens[i], i);
  auto find = [&](std::string_view t) { const auto it = id.find(t); return it == id.end() ? tokens.size() : it->second; };
  for (const std::string_view t : kControlLooking)
    if (const std::size_t i = find(t); i < tokens.size()) kinds[i] = 3;
  for (const std::string_view t : kUserDefined)
    if (const std::size_t i = find(t); i < tokens.size()) kinds[i] = 4;
  // Its two exceptions: "</s>" beside "<|tool_response>" (Gemma 4) is text; "<|end|>" beside
  // "<|return|>" and "<|call|>", or "<|calls|>" and "<|flush|>", is user-defined.
  auto has = [&](std::string_view t) { return find(t) < tokens.size(); };
  if (has("<|tool_response>") && has("</s>")) kinds[find("</s>")] = types ? static_cast<int>((*types)[find("</s>")]) == 3 ? 3 : 1 : 1;
  if (has("<|end|>") && ((has("<|return|>") && (has("<|call|>") || has("<|calls|>"))) || (has("<|calls|>") && has("<|flush|>"))))
    kinds[find("<|end|>")] = 4;
  return kinds;
}

}  // namespace

namespace {

// The vocabulary as tokenizer.json's model.vocab and its added tokens: unknown, control and
// user-defined tokens stay in the vocabulary (merges may make them) and are found in text
// first, as llama.cpp's parse_special does. A SentencePiece byte token must read <0xNN>.
void gguf_vocabulary(const GgufFile& f, const std::vector<std::string>& tokens, const std::vector<int>& kinds, bool spm,
                     JsonMap& vocab, JsonMap& added) {
  auto fail = [&](const std::string& what) { return ringattn::FileError("model " + f.path() + ": " + what); };
  vocab = JsonMap::object();
  added = JsonMap::array();
  const auto n = static_cast<std::int64_t>(tokens.size());
  for (std::int64_t id = 0; id < n; ++id) {
    const std::string& t = tokens[static_cast<std::size_t>(id)];
    const int type = kinds[static_cast<std::size_t>(id)];
    // Unknown, control and user-defined tokens stay in the vocabulary (merges may make them)
    // and are found in text first, as llama.cpp's parse_special does.
    if (type == 2 || type == 3 || type == 4) added.push_back({{"id", id}, {"content", t}, {"special", type != 4}});
    // SentencePiece: llama.cpp turns a byte token into its byte by its <0xNN> text, and
    // prints any other token's text: the two must coincide.
    const bool byte_text = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
                           std::isxdigit(static_cast<unsigned char>(t[4])) && !std::islower(static_cast<unsigned char>(t[3])) &&
                           !std::islower(static_cast<unsigned char>(t[4]));
    if (spm && (type == 6) != byte_text)
      throw fail("tokenizer.ggml.tokens[" + std::to_string(id) + "] \"" + t + "\" is " + (type == 6 ? "" : "not ") +
                 "of the byte type (6) but is " + (byte_text ? "" : "not ") + "a <0xNN> byte token");
    if (!vocab.emplace(t, id).second) {
      throw fail("tokenizer.ggml.tokens has \"" + t + "\" twice (ids " + std::to_string(vocab[t].get<std::int64_t>()) + " and " +
                 std::to_string(id) + ")");
    }
  }
}

// llama.cpp's BOS/EOS rule as a TemplateProcessing post-processor (null: it adds neither):
// a SentencePiece vocabulary adds BOS by default, and its BOS and EOS are 1 and 2.
JsonMap gguf_post_processor(const GgufFile& f, const std::vector<std::string>& tokens, bool spm) {
  auto fail = [&](const std::string& what) { return ringattn::FileError("model " + f.path() + ": " + what); };
  const auto n = static_cast<std::int64_t>(tokens.size());
  JsonMap post = nullptr;
  const bool add_bos = f.boolean("tokenizer.ggml.add_bos_token").value_or(spm);
  const bool add_eos = f.boolean("tokenizer.ggml.add_eos_token").value_or(false);
  if (add_bos || add_eos) {
    JsonMap single = JsonMap::array(), specials = JsonMap::object();
    auto special = [&](const char* key, std::int64_t spm_default) {
      std::optional<std::int64_t> id = f.integer(key, 0, n - 1);
      if (!id && spm && spm_default < n) id = spm_default;
      if (!id) throw fail(std::string(key) + " is missing, but the file asks for the token to be added");
      std::string name = std::to_string(*id);
      name.insert(name.begin(), '#');  // (not "#" + ...: GCC 12 warns falsely of an overlapping memcpy)
      specials[name] = {{"id", name}, {"ids", {*id}}, {"tokens", {tokens[static_cast<std::size_t>(*id)]}}};
      return JsonMap{{"SpecialToken", {{"id", name}, {"type_id", 0}}}};
    };
    if (add_bos) single.push_back(special("tokenizer.ggml.bos_token_id", 1));
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos) single.push_back(special("tokenizer.ggml.eos_token_id", 2));
    post = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  }
  return post;
}

}  // namespace

TokenizerJson gguf_tokenizer(const GgufFile& f) {
  auto fail = [&](const std::string& what) { return ringattn::FileError("model " + f.path() + ": " + what); };
  const std::string kind = f.string("tokenizer.ggml.model").value_or("");
  const bool spm = kind == "llama";
  if (kind != "gpt2" && !spm)
    throw fail("tokenizer.ggml.model is \"" + kind +
               "\"; only GGUF's byte-level BPE (\"gpt2\": Llama 3, Qwen) and SentencePiece (\"llama\": Llama 2, Mistral) "
               "vocabularies are implemented");
  const std::string pre = f.string("tokenizer.ggml.pre").value_or("default");
  const bool llama3 = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
  if (!spm && !llama3 && pre != "qwen2")
    throw fail("tokenizer.ggml.pre is \"" + pre + "\"; only llama-bpe (Llama 3) and qwen2 are implemented");
  const std::vector<std::string>* tokens = f.strings("tokenizer.ggml.tokens");
  const std::vector<std::string>* merges = f.strings("tokenizer.ggml.merges");
  const std::vector<double>* types = f.numbers("tokenizer.ggml.token_type");
  const std::vector<double>* scores = f.numbers("tokenizer.ggml.scores");
  if (tokens == nullptr || tokens->empty()) throw fail("tokenizer.ggml.tokens is missing or not an array of strings");
  if (!spm && merges == nullptr) throw fail("tokenizer.ggml.merges is missing or not an array of strings (a gpt2 vocabulary needs them)");
  if (spm && (scores == nullptr || scores->size() != tokens->size()))
    throw fail("tokenizer.ggml.scores is missing or not one number per token (a SentencePiece vocabulary needs them)");
  if (spm && types == nullptr) throw fail("tokenizer.ggml.token_type is missing (a SentencePiece vocabulary needs it for its byte tokens)");
  if (types != nullptr && types->size() != tokens->size())
    throw fail("tokenizer.ggml.token_type has " + std::to_string(types->size()) + " entries for " + std::to_string(tokens->size()) + " tokens");
  if (types != nullptr)
    for (std::size_t id = 0; id < types->size(); ++id)
      if (const double type = (*types)[id]; type != std::floor(type) || type < 0 || type > 6)
        throw fail("tokenizer.ggml.token_type[" + std::to_string(id) + "] = " + std::to_string(type) + " is no token type (0-6)");
  const std::vector<int> kinds = token_kinds(*tokens, types);

  JsonMap vocab, added;
  gguf_vocabulary(f, *tokens, kinds, spm, vocab, added);
  JsonMap post = gguf_post_processor(f, *tokens, spm);
  if (spm) {
    const JsonMap j = {
        {"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", JsonMap::array()}, {"byte_fallback", true}}},
        {"added_tokens", std::move(added)},
        {"normalizer", nullptr},
        {"pre_tokenizer", nullptr},
        {"post_processor", std::move(post)},
        {"decoder",
         {{"type", "Sequence"},
          {"decoders",
           {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}}, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}},
        {"llama_cpp_spm", {{"scores", *scores}, {"add_space_prefix", f.boolean("tokenizer.ggml.add_space_prefix").value_or(true)}}}};
    return TokenizerJson::from_json(j, f.path() + " (its GGUF vocabulary)", TokenizerJson::CleanUp::none, true);
  }
  const JsonMap j = {
      {"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", *merges}, {"ignore_merges", llama3}}},
      {"added_tokens", std::move(added)},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", split_regex(llama3 ? SplitPattern::llama3 : SplitPattern::qwen2)}}}, {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}}}}}},
      {"post_processor", std::move(post)},
      {"decoder", {{"type", "ByteLevel"}}}};
  return TokenizerJson::from_json(j, f.path() + " (its GGUF vocabulary)",
                                  llama3 ? TokenizerJson::CleanUp::llama_cpp : TokenizerJson::CleanUp::none, true);
}

std::vector<std::int32_t> gguf_end_tokens(const GgufFile& f) {
  const std::vector<std::string>* tokens = f.strings("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty()) return {};
  const auto n = static_cast<std::int64_t>(tokens->size());
  std::vector<std::int32_t> ends;
  auto add = [&](std::int64_t id) {
    if (std::find(ends.begin(), ends.end(), id) == ends.end()) ends.push_back(static_cast<std::int32_t>(id));
  };
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
                          "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"}) {
    if (const auto id = f.integer(key, 0, n - 1)) add(*id);
  }
  // The end-of-generation spellings (the first kEndSpellings of kControlLooking) that stay
  // control tokens, and the fill-in-the-middle pad, repository and file-separator tokens.
  const std::vector<int> kinds = token_kinds(*tokens, f.numbers("tokenizer.ggml.token_type"));
  for (std::int64_t id = 0; id < n; ++id) {
    const std::string& t = (*tokens)[static_cast<std::size_t>(id)];
    const auto* end = std::begin(kControlLooking) + kEndSpellings;
    const bool eog = std::find(std::begin(kControlLooking), end, t) != end && kinds[static_cast<std::size_t>(id)] == 3;
    const bool fim = std::find(std::begin(kFimEnds), std::end(kFimEnds), t) != std::end(kFimEnds);
    if (eog || fim) add(id);
  }
  std::sort(ends.begin(), ends.end());
  return ends;
}

}  // namespace infer
