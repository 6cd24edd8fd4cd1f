// `ringattn generate` on a Hugging Face directory that brings its own tokenizer.json: a
// seeded model (infer/write_hf.py) and a small byte-level BPE tokenizer written here (the
// GPT-2 byte characters, a few merges, Llama 3's split regex, BOS and end tokens as added
// special tokens, transformers' clean-up of spaces). The prompt is text; the printed text is
// the tokenizer's decode of the prompt and of the generated ids, whether streamed (text
// mode) or in --json, at P = 1 and 2; the model's eos_token_id (generation_config.json)
// ends the text; a text that encodes to no tokens is refused before the ring forms.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "infer/bpe.hpp"
#include "infer/json.hpp"
#include "infer/pretokenize.hpp"
#include "infer/tokenizer_json.hpp"
#include "tests/integration/spawn.hpp"

namespace ringattn::itest {

namespace {

namespace fs = std::filesystem;
using infer::Json;
using infer::JsonMap;

constexpr int kVocab = 300;
constexpr int kBos = 290, kEnd = 291, kEot = 292;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("ringattn-gentext-" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

// A byte-level BPE tokenizer.json of ids 0..255 (the bytes), merges up to id 255 + merges,
// and the specials at 290-292; transformers' clean-up of spaces (tokenizer_config.json).
void write_tokenizer(const fs::path& dir) {
  JsonMap vocab = JsonMap::object();
  for (int b = 0; b < 256; ++b) vocab[infer::byte_char(static_cast<unsigned char>(b))] = b;
  const std::string g = infer::byte_char(' ');  // Ġ
  const std::vector<std::pair<std::string, std::string>> merges = {
      {g, "t"}, {"h", "e"}, {g + "t", "he"}, {"i", "n"}, {g, "a"}, {"e", "r"}, {"o", "n"}, {g, "s"}, {"r", "e"}, {"a", "t"},
      {g, "w"}, {"o", "r"}, {"e", "n"}, {g, "o"}, {"n", "'t"}, {"'", "t"}, {g + "w", "or"}, {"l", "d"}, {g + "wor", "ld"}};
  JsonMap m = JsonMap::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    m.push_back(a + " " + b);
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
  }
  REQUIRE(next < kBos);
  JsonMap added = JsonMap::array();
  for (const auto& [id, text] : std::vector<std::pair<int, std::string>>{{kBos, "<|begin_of_text|>"}, {kEnd, "<|end_of_text|>"}, {kEot, "<|eot_id|>"}}) {
    added.push_back({{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
    vocab[text] = id;
  }
  const JsonMap t = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", std::string(infer::split_regex(infer::SplitPattern::llama3))}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {kBos}}, {"tokens", {"<|begin_of_text|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", true},
        {"vocab", vocab}, {"merges", m}}}};
  std::ofstream(dir / "tokenizer.json") << t.dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"clean_up_tokenization_spaces": true})";
}

void write_model(const fs::path& dir) {
  const Outcome w = [&] {
    Spawned p({RINGATTN_SOURCE_ROOT "/infer/write_hf.py", "--out", dir.string(), "--arch", "llama", "--dtype", "fp32", "--seed", "3",
               "--vocab", std::to_string(kVocab)},
              {}, "/usr/bin/python3");
    return p.wait(120);
  }();
  REQUIRE_MESSAGE(w.exit_code == 0, "write_hf.py: " << w.err);
  write_tokenizer(dir);
}

Json run_json(const fs::path& dir, const std::string& prompt, int nodes, int tokens) {
  const Outcome r = run_ringattn({"generate", "--model", dir.string(), "--prompt", prompt, "--max-tokens", std::to_string(tokens),
                                  "--nodes", std::to_string(nodes), "--threads", "1", "--timeout", "60", "--json"});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.group_empty);
  const Json j = infer::parse_json(r.out);
  REQUIRE(j.at("results").size() == 1);
  return j.at("results")[0];
}

std::vector<int> ids_of(const Json& r) {
  std::vector<int> ids;
  for (const Json& t : r.at("tokens")) ids.push_back(static_cast<int>(t.get<double>()));
  return ids;
}

}  // namespace

TEST_CASE("generate --model DIR: a prompt as text through the directory's tokenizer.json, its decode printed, its eos_token_id ends it") {
  Scratch s;
  write_model(s.dir);
  const infer::TokenizerJson tok = infer::TokenizerJson::load(s.dir / "tokenizer.json", s.dir / "tokenizer_config.json");
  const std::string prompt = "the world isn't flat , it 's round. Ünïcode 🙂";
  const std::vector<int> prompt_ids = tok.encode(prompt, true);
  REQUIRE(prompt_ids.front() == kBos);

  const Json one = run_json(s.dir, prompt, 1, 40);
  const std::vector<int> ids = ids_of(one);
  REQUIRE(ids.size() == 40);  // the seeded model's config.json names no end token
  CHECK(one.at("prompt_tokens").get<double>() == static_cast<double>(prompt_ids.size()));
  const std::string want = tok.decode(prompt_ids, true) + tok.decode(ids, true);
  CHECK(one.at("text").get<std::string>() == want);
  const Json two = run_json(s.dir, prompt, 2, 40);
  CHECK(ids_of(two) == ids);
  CHECK(two.at("text").get<std::string>() == want);

  {  // text mode streams the same text, token by token
    const Outcome r = run_ringattn({"generate", "--model", s.dir.string(), "--prompt", prompt, "--max-tokens", "40", "--nodes", "2",
                                    "--threads", "1", "--timeout", "60"});
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.rfind(want, 0) == 0);
    CHECK(r.out.size() <= want.size() + 1);  // and a newline at most
  }

  // The first generated token that did not come before it becomes the end token: the text
  // stops right before it, and so do the ids.
  std::size_t k = 1;
  while (k < ids.size() && std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids[k]) != ids.begin() + static_cast<std::ptrdiff_t>(k)) ++k;
  REQUIRE(k < ids.size());
  std::ofstream(s.dir / "generation_config.json") << "{\"eos_token_id\": [" << kEot << ", " << ids[k] << "]}";
  const Json ended = run_json(s.dir, prompt, 2, 40);
  const std::vector<int> head(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
  CHECK(ids_of(ended) == head);
  CHECK(ended.at("text").get<std::string>() == tok.decode(prompt_ids, true) + tok.decode(head, true));

  {  // an eos_token_id outside the model's vocabulary is refused naming the file
    std::ofstream(s.dir / "generation_config.json") << "{\"eos_token_id\": " << kVocab << "}";
    const Outcome r = run_ringattn({"generate", "--model", s.dir.string(), "--prompt", "x", "--max-tokens", "2", "--nodes", "1",
                                    "--threads", "1", "--timeout", "60"});
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("generation_config.json") != std::string::npos);
    CHECK(r.err.find("eos_token_id") != std::string::npos);
    fs::remove(s.dir / "generation_config.json");
  }
}

TEST_CASE("generate --model DIR: an empty text without a BOS is refused; a tokenizer larger than the model is refused") {
  Scratch s;
  write_model(s.dir);
  {  // this tokenizer adds BOS: an empty prompt is BOS alone and runs
    const Json r = run_json(s.dir, "", 1, 3);
    CHECK(r.at("prompt_tokens").get<double>() == 1);
  }
  // Without its post-processor the empty text is no tokens: refused before any ring forms.
  {
    JsonMap t = infer::parse_json_map([&] {
      std::ifstream f(s.dir / "tokenizer.json");
      return std::string(std::istreambuf_iterator<char>(f), {});
    }());
    t["post_processor"] = nullptr;
    std::ofstream(s.dir / "tokenizer.json") << t.dump();
  }
  const Outcome r = run_ringattn({"generate", "--model", s.dir.string(), "--prompt", "", "--max-tokens", "2", "--nodes", "2",
                                  "--threads", "1", "--timeout", "60"});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("encodes to no tokens") != std::string::npos);
  CHECK(r.group_empty);
  // A tokenizer with ids past the model's embedding rows is not this model's.
  {
    JsonMap t = infer::parse_json_map([&] {
      std::ifstream f(s.dir / "tokenizer.json");
      return std::string(std::istreambuf_iterator<char>(f), {});
    }());
    t["added_tokens"].push_back({{"id", kVocab + 5}, {"content", "<|far|>"}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
    std::ofstream(s.dir / "tokenizer.json") << t.dump();
  }
  const Outcome far = run_ringattn({"generate", "--model", s.dir.string(), "--prompt", "x", "--max-tokens", "2", "--nodes", "1",
                                    "--threads", "1", "--timeout", "60"});
  CHECK(far.exit_code != 0);
  CHECK(far.err.find("not this model's tokenizer") != std::string::npos);
}

}  // namespace ringattn::itest
