// llama2.c's tokenizer (infer/tokenizers/tokenizer.hpp) on the real stories260K vocabulary:
// the prompt's ids and the generated text exactly as llama2.c's run.c printed them
// (../shared/models/stories260K/README.md), and the heap merge equal to llama2.c's rescans.
// Every case needs the model (hostile files: test_hostile_files.cpp).
#include <doctest/doctest.h>

#include <random>
#include <span>
#include <string>
#include <vector>

#include "tests/model/model_files.hpp"
#include "tokenizers/tokenizer.hpp"

using infer::Tokenizer;

TEST_CASE("tokenizer: stories260K's vocabulary reads as the README describes it") {
  const auto dir = test::model_dir();
  if (!dir) return;
  const Tokenizer t = Tokenizer::load((*dir / "tok512.bin").string(), 512);
  CHECK(t.vocab() == 512);
  CHECK(t.piece(0) == "<unk>");
  CHECK(t.piece(1) == "\n<s>\n");
  CHECK(t.piece(2) == "\n</s>\n");
  CHECK(t.piece(3) == "<0x00>");
  CHECK(t.piece(258) == "<0xFF>");
  CHECK(t.piece(259) == " t");
  CHECK(t.piece(260) == "he");
  CHECK(t.piece(261) == " a");
  CHECK(t.score(259) == 0.0f);
  CHECK(t.score(260) == -1.0f);
  CHECK(t.id_of(" Once") == 403);
}

TEST_CASE("tokenizer: the prompt encodes to llama2.c's ids, and the run's ids decode to its text") {
  const auto dir = test::model_dir();
  if (!dir) return;
  const Tokenizer t = Tokenizer::load((*dir / "tok512.bin").string(), 512);
  CHECK(t.encode("Once upon a time", true, false) == test::kPromptIds);
  CHECK(t.encode_by_rescans("Once upon a time", true, false) == test::kPromptIds);
  std::vector<int> with_eos = test::kPromptIds;
  with_eos.push_back(Tokenizer::kEos);
  CHECK(t.encode("Once upon a time", true, true) == with_eos);
  CHECK(t.encode("", true, false) == std::vector<int>{Tokenizer::kBos});  // no dummy prefix for no text
  const std::string text = t.text(test::kRunIds) + "\n";  // run.c prints one '\n' after the last token
  CHECK(text == test::kRunText + "\n");
  CHECK(text.size() == 181);
  // The text encodes back to the same ids (the model's greedy output is what BPE makes of it).
  const std::vector<int> back = t.encode(test::kRunText, true, false);
  CHECK(std::vector<int>(back.begin() + 1, back.end()) == test::kRunIds);
}

TEST_CASE("tokenizer: the heap's merges equal llama2.c's rescans, on long text, UTF-8 and raw bytes") {
  const auto dir = test::model_dir();
  if (!dir) return;
  const Tokenizer t = Tokenizer::load((*dir / "tok512.bin").string(), 512);
  std::string long_text;
  for (int i = 0; i < 6; ++i) long_text += test::kRunText + " ";
  std::mt19937 rng(7);
  std::string bytes(600, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() % 256);
  for (const std::string& s : {long_text, std::string("Café naïve — 日本語 🙂 done"), bytes, std::string("   a  b   "),
                               std::string("\xe9\xe9\x80\x80\x80\x80\x80 x")}) {
    const auto heap = t.encode(s, true, false);
    CHECK(heap == t.encode_by_rescans(s, true, false));
    for (int id : heap) CHECK((id >= 0 && id < 512));
  }
  // Bytes no piece covers come back through the <0xNN> fallback: UTF-8 text round-trips.
  const std::string utf8 = "Café naïve — 日本語";
  const std::vector<int> ids = t.encode(utf8, true, false);
  CHECK(t.text(std::span<const int>(ids).subspan(1)) == utf8);  // after BOS: the dummy prefix's space goes
  CHECK(Tokenizer::printable("\n"));
  CHECK_FALSE(Tokenizer::printable(std::string(1, '\x07')));
  CHECK_FALSE(Tokenizer::printable(""));
}
