// A seeded Hugging Face directory with its own tokenizer.json (hf_text_model.hpp).
#include "tests/integration/hf_text_model.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "infer/tokenizers/bpe.hpp"
#include "infer/common/json.hpp"
#include "infer/tokenizers/pretokenize.hpp"
#include "tests/integration/spawn.hpp"

namespace test::hf_text {

namespace fs = std::filesystem;
using infer::JsonMap;
using ringattn::itest::Outcome;
using ringattn::itest::Spawned;

// A byte-level BPE tokenizer.json of ids 0..255 (the bytes), merges up to id 255 + merges,
// and the specials at 290-292; transformers' clean-up of spaces and a chat template in the
// Llama 3 manner (tokenizer_config.json, kChatTemplate).
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
  const infer::Json config = {{"clean_up_tokenization_spaces", true},
                              {"bos_token", "<|begin_of_text|>"},
                              {"eos_token", {{"content", "<|eot_id|>"}, {"lstrip", false}}},
                              {"chat_template", kChatTemplate}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump(2);
}

void write_model(const fs::path& dir, int seed) {
  const Outcome w = [&] {
    Spawned p({RINGATTN_SOURCE_ROOT "/tools/write_hf.py", "--out", dir.string(), "--arch", "llama", "--dtype", "fp32", "--seed", std::to_string(seed),
               "--vocab", std::to_string(kVocab)},
              {}, "/usr/bin/python3");
    return p.wait(120);
  }();
  REQUIRE_MESSAGE(w.exit_code == 0, "write_hf.py: " << w.err);
  // The tokenizer's BOS and end of text, not write_hf.py's llama2.c ids (1 and 2).
  infer::Json config = infer::parse_json([&] {
    std::ifstream f(dir / "config.json");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }());
  config["bos_token_id"] = kBos;
  config["eos_token_id"] = kEnd;
  std::ofstream(dir / "config.json") << config.dump(2);
  write_tokenizer(dir);
}

std::string printed(const infer::TokenizerJson& tok, const std::vector<int>& ids) {
  std::vector<int> known;
  for (const int id : ids)
    if (tok.has(id)) known.push_back(id);
  return tok.decode(known, true);
}

}  // namespace test::hf_text
