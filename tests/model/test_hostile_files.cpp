// The model runtime's readers (infer/) against hostile files; no model needed: tokenizer
// files refused naming the file and the record, llama2.c checkpoints refused by header and
// size before a weight is read.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "model/model.hpp"
#include "tests/error_of.hpp"
#include "tokenizers/tokenizer.hpp"

namespace fs = std::filesystem;
using infer::Model;
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

TEST_CASE("llama2c: hostile checkpoints are refused by header and size before a weight is read") {
  auto write = [](const std::string& name, const std::string& bytes) {
    const fs::path p = fs::temp_directory_path() / ("ringattn-l2c-" + std::to_string(::getpid()) + "-" + name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  };
  auto refused = [&](const std::string& name, const std::string& bytes) {
    const fs::path p = write(name, bytes);
    const std::string m = error_of([&] { Model::from_llama2c(p.string()); });
    fs::remove(p);
    return m;
  };
  auto header = [](std::vector<std::int32_t> h) { return std::string(reinterpret_cast<const char*>(h.data()), 4 * h.size()); };
  CHECK(refused("short", "abc").find("shorter than llama2.c's 28-byte header") != std::string::npos);
  CHECK(refused("zero-dim", header({0, 172, 5, 8, 4, 512, 512})).find("dim = 0 is outside") != std::string::npos);
  CHECK(refused("huge-vocab", header({64, 172, 5, 8, 4, -(1 << 30), 512})).find("vocab_size") != std::string::npos);
  CHECK(refused("kv", header({64, 172, 5, 8, 3, 512, 512})).find("n_kv_heads 3 does not divide n_heads 8") !=
        std::string::npos);
  CHECK(refused("heads", header({64, 172, 5, 7, 7, 512, 512})).find("not a multiple of n_heads") != std::string::npos);
  const std::string m = refused("no-weights", header({64, 172, 5, 8, 4, 512, 512}));
  CHECK(m.find("model ") == 0);
  CHECK(m.find("28 bytes, but a checkpoint of this header") != std::string::npos);
  CHECK(m.find("is 1056540") != std::string::npos);  // stories260K's size: the arithmetic of the README
  CHECK(error_of([] { Model::from_llama2c("/dev/zero"); }).find("not a regular file") != std::string::npos);
}
