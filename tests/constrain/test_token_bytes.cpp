// Each token's bytes (TextTokenizer::text_bytes, infer/constrain/token_bytes.hpp) against the
// tokenizer's own stream: for seeded random sequences of tokens whose bytes join into well-formed
// UTF-8 (the only texts a grammar lets through), the stream's text after a prompt is the bytes
// joined, and after a bare BOS the same but for the leading space a decoder may take; BytesStream
// gives the same text, never cut inside a character. On the tokenizer.json seeds the model tests
// use (byte-level, SentencePiece with byte fallback, Gemma's added tokens), with their clean-up
// of spaces off, and on stories260K's tok512.bin.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "infer/constrain/token_bytes.hpp"
#include "infer/job/model_files.hpp"
#include "infer/job/options.hpp"
#include "infer/job/text_tokenizer.hpp"
#include "tests/constrain/token_bytes_check.hpp"
#include "tests/model/model_files.hpp"

namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ringattn-constrain-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// The job's tokenizer for the seed `name`, copied beside a tokenizer_config.json that turns the
// clean-up of spaces off.
std::unique_ptr<infer::TextTokenizer> seed_tokenizer(const std::string& name, const TempDir& dir) {
  fs::copy_file(fs::path(RINGATTN_SOURCE_ROOT) / "tests/fuzz/corpus/tokenizer_json" / (name + ".json"), dir.path / "tokenizer.json");
  std::ofstream(dir.path / "tokenizer_config.json") << R"({"clean_up_tokenization_spaces": false})";
  infer::JobOptions opt;
  opt.tokenizer = (dir.path / "tokenizer.json").string();
  opt.model.vocab = 1 << 20;
  infer::ModelFiles files("", "", opt.tokenizer);
  auto t = infer::load_text_tokenizer(opt, files).tokenizer;
  REQUIRE(t);
  return t;
}

}  // namespace

TEST_CASE("constrain: the tokens' bytes of tokenizer.json seeds, joined, are their streams' text") {
  for (const char* name : {"tiny-byte-level", "tiny-sentencepiece", "tiny-gemma"}) {
    CAPTURE(name);
    TempDir dir;
    const auto tok = seed_tokenizer(name, dir);
    const infer::constrain::TokenBytes bytes = infer::constrain::token_bytes(*tok);
    CHECK(bytes.vocab() == tok->vocab());
    test::check_token_bytes(*tok, bytes, 200, 7);
  }
  // What is never text: special tokens; and what is: a non-special added token, as the stream
  // shows it (Gemma's "▁▁", its own piece, is two spaces).
  TempDir dir;
  const auto gemma = seed_tokenizer("tiny-gemma", dir);
  const infer::constrain::TokenBytes g = infer::constrain::token_bytes(*gemma);
  for (const int special : {0, 1, 2, 268, 269}) CHECK_FALSE(g.text(special));
  CHECK(g.bytes(270) == "\n");
  CHECK(g.bytes(271) == "  ");
  CHECK(g.bytes(272) == "<b>");
}

TEST_CASE("constrain stories260K: the tokens' bytes of tok512.bin, joined, are its stream's text") {
  const auto dir = test::model_dir();
  if (!dir) return;
  infer::JobOptions opt;
  opt.tokenizer = (*dir / "tok512.bin").string();
  opt.model.vocab = 512;
  infer::ModelFiles files("", "", opt.tokenizer);
  const auto tok = infer::load_text_tokenizer(opt, files).tokenizer;
  REQUIRE(tok);
  const infer::constrain::TokenBytes bytes = infer::constrain::token_bytes(*tok);
  CHECK_FALSE(bytes.text(0));  // <unk>, BOS, EOS
  CHECK_FALSE(bytes.text(1));
  CHECK_FALSE(bytes.text(2));
  CHECK_FALSE(bytes.text(3 + 0x01));  // a control byte run.c does not print
  CHECK(bytes.bytes(3 + '\n') == "\n");
  CHECK(bytes.bytes(3 + 0xC3) == "\xc3");
  CHECK(bytes.bytes(403) == " Once");
  test::check_token_bytes(*tok, bytes, 300, 11);
}
