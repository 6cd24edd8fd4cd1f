// llama2.c's tokenizer (infer/tokenizer.hpp) on the real stories260K vocabulary:
// the prompt's ids and the generated text exactly as llama2.c's run.c printed them
// (../shared/models/stories260K/README.md), the heap merge equal to llama2.c's rescans,
// and hostile tokenizer files refused naming the file and the record.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <fstream>
#include <optional>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "tests/error_of.hpp"
#include "tests/model/model_files.hpp"
#include "tokenizer.hpp"

namespace fs = std::filesystem;
using infer::Tokenizer;

using ringattn::test::error_of;

namespace {

// A tokenizer file of `vocab` records written from parts, for the hostile cases.
struct FileWriter {
  std::string bytes;
  void i32(std::int32_t v) { bytes.append(reinterpret_cast<const char*>(&v), 4); }
  void f32(float v) { bytes.append(reinterpret_cast<const char*>(&v), 4); }
  void record(float score, const std::string& piece) {
    f32(score);
    i32(static_cast<std::int32_t>(piece.size()));
    bytes += piece;
  }
  // A well-formed vocabulary of 3 + 256 + extra tokens.
  static FileWriter valid(int extra = 2) {
    FileWriter w;
    w.i32(8);
    w.record(0, "<unk>");
    w.record(0, "\n<s>\n");
    w.record(0, "\n</s>\n");
    for (int b = 0; b < 256; ++b) {
      char p[8];
      std::snprintf(p, sizeof p, "<0x%02X>", b);
      w.record(0, p);
    }
    for (int i = 0; i < extra; ++i) w.record(-static_cast<float>(i), std::string(1, static_cast<char>('a' + i)));
    return w;
  }
  fs::path write(const std::string& name) const {
    const fs::path p = fs::temp_directory_path() / ("ringattn-tok-" + std::to_string(::getpid()) + "-" + name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
};

}  // namespace

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

TEST_CASE("tokenizer: hostile files are refused naming the file and what is wrong") {
  auto refused = [](const FileWriter& w, const std::string& name, std::int64_t vocab = 261) {
    const fs::path p = w.write(name);
    const std::string m = error_of([&] { Tokenizer::load(p.string(), vocab); });
    fs::remove(p);
    return m;
  };
  CHECK(refused(FileWriter::valid(), "ok") == "");
  {
    FileWriter w = FileWriter::valid();
    w.bytes.resize(w.bytes.size() - 3);
    const std::string m = refused(w, "short");
    CHECK(m.find("tokenizer ") == 0);
    CHECK(m.find("-short: ends at byte") != std::string::npos);
    CHECK(m.find("token 260") != std::string::npos);
  }
  {
    FileWriter w = FileWriter::valid();
    w.bytes += "xx";
    CHECK(refused(w, "trailing").find("2 bytes after the 261 tokens") != std::string::npos);
  }
  CHECK(refused(FileWriter::valid(), "big-vocab", 300).find("inside token 261") != std::string::npos);
  {
    FileWriter w = FileWriter::valid();
    std::int32_t bad = 0;
    std::memcpy(w.bytes.data(), &bad, 4);
    CHECK(refused(w, "maxlen").find("max_token_length = 0") != std::string::npos);
  }
  {
    FileWriter w;
    w.i32(4);
    w.record(0, "<unk>");  // 5 bytes > 4
    CHECK(refused(w, "long").find("token 0 has length 5, outside 0..max_token_length 4") != std::string::npos);
  }
  {
    FileWriter w;
    w.i32(8);
    w.f32(std::nanf(""));
    w.i32(0);
    CHECK(refused(w, "nan").find("token 0 has a score that is not finite") != std::string::npos);
  }
  {
    FileWriter w;
    w.i32(8);
    w.record(0, "<unk>");
    w.f32(0);
    w.i32(-1);
    CHECK(refused(w, "negative").find("token 1 has length -1") != std::string::npos);
  }
  {
    FileWriter w = FileWriter::valid();
    const std::string good = "<0x41>";
    w.bytes.replace(w.bytes.find(good), good.size(), "<0x4g>");
    CHECK(refused(w, "nobyte").find("not the byte piece <0x41>") != std::string::npos);
  }
  CHECK(error_of([] { Tokenizer::load("/dev/zero", 512); }).find("not a regular file") != std::string::npos);
  CHECK(error_of([] { Tokenizer::load("/nonexistent/tok.bin", 512); }).find("/nonexistent/tok.bin") != std::string::npos);
  CHECK(refused(FileWriter::valid(), "tiny-vocab", 100).find("cannot hold") != std::string::npos);
}
