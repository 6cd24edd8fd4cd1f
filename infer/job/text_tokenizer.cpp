// infer — the model's tokenizer as generation uses it (text_tokenizer.hpp).
#include "text_tokenizer.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <filesystem>

#include "../formats/gguf.hpp"
#include "../common/json.hpp"
#include "model_files.hpp"
#include "options.hpp"
#include "../tokenizers/tokenizer.hpp"
#include "../tokenizers/tokenizer_gguf.hpp"
#include "../tokenizers/tokenizer_json.hpp"

namespace infer {

namespace {

namespace fs = std::filesystem;

// llama2.c's tokenizer.bin: pieces after the previous token, as run.c prints them.
class Llama2cText final : public TextTokenizer {
 public:
  Llama2cText(Tokenizer t, std::string path) : t_(std::move(t)), path_(std::move(path)) {}
  std::vector<int> encode(std::string_view text, bool opens) const override { return t_.encode(text, opens, false); }
  std::vector<int> opening() const override { return {Tokenizer::kBos}; }
  std::string text(std::span<const int> tokens) const override { return t_.sequence_text(tokens); }
  std::unique_ptr<TextStream> stream(std::span<const int> prompt) const override {
    return std::make_unique<Stream>(t_, prompt.empty() ? Tokenizer::kBos : prompt.back());
  }
  std::optional<std::string> text_bytes(int token) const override {
    // <unk>, BOS and EOS are markers, not text; a piece the stream drops (a lone control byte) is none.
    if (token <= Tokenizer::kEos || token >= t_.vocab()) return std::nullopt;
    const std::string_view piece = t_.decode(Tokenizer::kEos, token);
    if (!Tokenizer::printable(piece)) return std::nullopt;
    return std::string(piece);
  }
  std::int64_t vocab() const override { return t_.vocab(); }
  std::uint64_t digest() const override { return t_.digest(); }
  std::string describe() const override { return "tokenizer " + path_ + " (llama2.c)"; }

 private:
  class Stream final : public TextStream {
   public:
    Stream(const Tokenizer& t, int prev) : t_(t), prev_(prev) {}
    std::string next(int token) override {
      std::string piece = token >= 0 && token < t_.vocab() ? t_.text(std::span<const int>(&token, 1), prev_) : "";
      prev_ = token;
      return piece;
    }
    std::string finish() override { return ""; }

   private:
    const Tokenizer& t_;
    int prev_;
  };
  Tokenizer t_;
  std::string path_;
};

// A tokenizer.json or a GGUF vocabulary: generated text without special tokens. `rows`: the
// model's tokens; an added token past them (load_text_tokenizer) is refused where a text holds it.
class JsonText final : public TextTokenizer {
 public:
  JsonText(TokenizerJson t, std::string what, std::int64_t rows) : t_(std::move(t)), what_(std::move(what)), rows_(rows) {}
  std::vector<int> encode(std::string_view text, bool opens) const override {
    std::vector<int> ids = t_.encode(text, opens);
    for (const int id : ids)
      if (id >= rows_)
        throw ringattn::InvalidArgument("the text holds \"" + t_.piece(id) + "\", token " + std::to_string(id) + " of " + what_ +
                                        ", which is past the model's " + std::to_string(rows_) + " tokens: the model cannot read it");
    return ids;
  }
  std::vector<int> opening() const override { return t_.opening(); }
  std::string text(std::span<const int> tokens) const override {
    std::vector<int> known;
    for (const int t : tokens)
      if (t_.has(t)) known.push_back(t);
    return t_.decode(known, true);
  }
  std::unique_ptr<TextStream> stream(std::span<const int> prompt) const override {
    auto s = std::make_unique<Stream>(t_.stream(true), t_);
    // The prompt's text is printed on its own: fed only for where the text stands (past
    // its leading spaces), its held-back tail dropped.
    for (const int t : prompt) s->next(t);
    s->finish();
    return s;
  }
  std::optional<std::string> text_bytes(int token) const override { return t_.text_bytes(token); }
  std::int64_t vocab() const override { return t_.vocab(); }
  std::uint64_t digest() const override { return t_.digest(); }
  std::string describe() const override { return what_; }

 private:
  class Stream final : public TextStream {
   public:
    Stream(TokenizerJson::Stream s, const TokenizerJson& t) : s_(std::move(s)), t_(t) {}
    std::string next(int token) override { return t_.has(token) ? s_.next(token) : ""; }
    std::string finish() override { return s_.finish(); }

   private:
    TokenizerJson::Stream s_;
    const TokenizerJson& t_;
  };
  TokenizerJson t_;
  std::string what_;
  std::int64_t rows_;
};

// An eos_token_id of a Hugging Face file: an id or a list of ids, each in [0, vocab).
std::vector<std::int32_t> eos_ids(const Json& j, const std::string& path, std::int64_t vocab) {
  const Json* e = json_field(j, "eos_token_id");
  if (e == nullptr || e->is_null()) return {};
  std::vector<std::int32_t> ids;
  try {
    if (e->is_array()) {
      if (e->size() > 64) throw std::runtime_error("has more than 64 ids");
      for (const Json& x : *e) ids.push_back(static_cast<std::int32_t>(json_int(x, "eos_token_id", 0, vocab - 1)));
    } else {
      ids.push_back(static_cast<std::int32_t>(json_int(*e, "eos_token_id", 0, vocab - 1)));
    }
  } catch (const std::runtime_error& x) {
    throw ringattn::FileError("model " + path + ": eos_token_id " + x.what() + " (the model has " + std::to_string(vocab) + " tokens)");
  }
  return ids;
}

}  // namespace

LoadedTokenizer load_text_tokenizer(const JobOptions& opt, ModelFiles& files) {
  LoadedTokenizer out;
  // Ids past the model's rows: none, or only added tokens that continue the rows without a
  // gap. Gemma 3's text checkpoints (1B, 270M) have 262144 rows and a tokenizer.json whose
  // added <image_soft_token> is 262144, the id its multimodal siblings embed.
  auto json_tokenizer = [&](TokenizerJson t, std::string what) {
    for (std::int64_t id = opt.model.vocab; id < t.vocab(); ++id)
      if (!t.has(static_cast<int>(id)) || !t.added(static_cast<int>(id)))
        throw ringattn::FileError(what + ": has ids up to " + std::to_string(t.vocab() - 1) + " but the model has " +
                                  std::to_string(opt.model.vocab) + " tokens: not this model's tokenizer");
    out.tokenizer = std::make_unique<JsonText>(std::move(t), std::move(what), opt.model.vocab);
  };
  // The tokenizer_config.json beside a tokenizer.json: its decode setting.
  auto load_json = [&](const fs::path& file) {
    const JsonMapFile* config = files.tokenizer_config();
    return TokenizerJson::load(file, config ? &config->json : nullptr, config ? config->path : std::string());
  };
  if (!opt.tokenizer.empty()) {
    const fs::path file(opt.tokenizer);
    if (file.extension() == ".json")
      json_tokenizer(load_json(file), "tokenizer " + opt.tokenizer);
    else
      out.tokenizer = std::make_unique<Llama2cText>(Tokenizer::load(opt.tokenizer, opt.model.vocab), opt.tokenizer);
  } else if (!opt.hf.empty()) {
    const fs::path dir(opt.hf);
    if (fs::exists(dir / "tokenizer.json"))
      json_tokenizer(load_json(dir / "tokenizer.json"), "tokenizer " + (dir / "tokenizer.json").string());
    else
      out.missing = "the model directory " + opt.hf + " has no tokenizer.json: give --tokenizer FILE";
  } else if (!opt.gguf.empty()) {
    const GgufFile& f = files.gguf();
    if (!f.strings("tokenizer.ggml.tokens")) {
      out.missing = "the GGUF file " + opt.gguf + " holds no vocabulary: give --tokenizer FILE";
    } else {
      try {
        json_tokenizer(gguf_tokenizer(f), "tokenizer of " + opt.gguf + " (its GGUF vocabulary)");
      } catch (const ringattn::FileError& e) {
        // A kind this runtime does not run: the model still runs on ids.
        out.missing = std::string(e.what()) + "; give --tokenizer FILE, or prompts as token ids";
      }
    }
  } else {
    out.missing = "give --tokenizer FILE (the model's tokenizer)";
  }
  return out;
}

std::vector<std::int32_t> end_tokens(const JobOptions& opt, ModelFiles& files) {
  std::vector<std::int32_t> ends;
  if (!opt.hf.empty()) {
    if (const Json* generation = files.hf_generation_config())
      ends = eos_ids(*generation, opt.hf + "/generation_config.json", opt.model.vocab);
    if (ends.empty()) ends = eos_ids(files.hf_config().json, files.hf_config().path, opt.model.vocab);
  } else if (!opt.gguf.empty()) {
    ends = gguf_end_tokens(files.gguf());
    if (std::any_of(ends.begin(), ends.end(), [&](std::int32_t t) { return t >= opt.model.vocab; }))
      throw ringattn::FileError("model " + opt.gguf + ": an end-of-generation token id is past the model's " +
                                std::to_string(opt.model.vocab) + " tokens");
  } else {
    ends = {Tokenizer::kBos, Tokenizer::kEos};  // llama2.c's: run.c stops at BOS
  }
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  return ends;
}

}  // namespace infer
