// A tokenizer.json beside a model with fewer rows than the tokenizer has ids
// (infer/job/text_tokenizer.hpp): Gemma 3's text checkpoints have 262144 rows and a tokenizer
// whose added <image_soft_token> is 262144. Added tokens that follow the last row without a
// gap load, and a text that holds one is refused naming it (nothing could embed it); any
// other id past the rows is not this model's tokenizer. On the Gemma-shaped fuzz seed, whose
// last five ids are added tokens; Gemma 3's real files are test_tokenizer_json.cpp's.
#include <doctest/doctest.h>

#include <ringattn/error.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "infer/common/json.hpp"
#include "infer/job/model_files.hpp"
#include "infer/job/options.hpp"
#include "infer/job/text_tokenizer.hpp"
#include "infer/tokenizers/tokenizer_json.hpp"
#include "tests/error_of.hpp"

namespace {

namespace fs = std::filesystem;
using ringattn::test::error_of;

const fs::path kGemmaSeed = RINGATTN_SOURCE_ROOT "/tests/fuzz/corpus/tokenizer_json/tiny-gemma.json";

// The job's tokenizer for `file` beside a model of `rows` tokens.
infer::LoadedTokenizer beside(const fs::path& file, std::int64_t rows) {
  infer::JobOptions opt;
  opt.tokenizer = file.string();
  opt.model.vocab = rows;
  infer::ModelFiles files("", "", opt.tokenizer);
  return infer::load_text_tokenizer(opt, files);
}

bool has(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

}  // namespace

TEST_CASE("text tokenizer: added tokens just past the model's rows load, and a text holding one is refused naming it") {
  const infer::TokenizerJson t = infer::TokenizerJson::load(kGemmaSeed);
  const int rows = static_cast<int>(t.vocab());
  const std::string marks = "\xe2\x96\x81\xe2\x96\x81";
  REQUIRE(*t.id_of("<b>") == rows - 1);
  REQUIRE(*t.id_of(marks) == rows - 2);
  REQUIRE(*t.id_of("<start_of_turn>") == rows - 5);
  REQUIRE_FALSE(t.added(rows - 6));

  CHECK(beside(kGemmaSeed, rows).tokenizer->encode("a<b>a" + marks, true) == t.encode("a<b>a" + marks, true));
  {
    const auto one_past = beside(kGemmaSeed, rows - 1);  // <b> past the rows
    REQUIRE(one_past.tokenizer);
    CHECK(one_past.tokenizer->encode("a  a\n" + marks, true) == t.encode("a  a\n" + marks, true));
    const std::string e = error_of([&] { (void)one_past.tokenizer->encode("a<b>a", false); });
    CHECK(has(e, "the text holds \"<b>\", token " + std::to_string(rows - 1)));
    CHECK(has(e, "past the model's " + std::to_string(rows - 1) + " tokens"));
    CHECK(has(e, kGemmaSeed.string()));
    CHECK_THROWS_AS((void)one_past.tokenizer->encode("a<b>a", false), ringattn::InvalidArgument);
  }
  {
    const auto five_past = beside(kGemmaSeed, rows - 5);  // every added token past the rows
    REQUIRE(five_past.tokenizer);
    CHECK(five_past.tokenizer->encode("a  a", true) == t.encode("a  a", true));  // spaces: the vocabulary's own U+2581
    CHECK(has(error_of([&] { (void)five_past.tokenizer->encode("x" + marks, false); }), "token " + std::to_string(rows - 2)));
    CHECK(has(error_of([&] { (void)five_past.tokenizer->encode("<start_of_turn>", false); }), "\"<start_of_turn>\""));
  }
  // A piece of the vocabulary past the rows: not this model's tokenizer.
  CHECK(has(error_of([&] { (void)beside(kGemmaSeed, rows - 6); }), "not this model's tokenizer"));
}

TEST_CASE("text tokenizer: an added token past the model's rows with a gap before it is not this model's tokenizer") {
  infer::JsonMap j = infer::parse_json_map([] {
    std::ifstream f(kGemmaSeed);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }());
  const auto rows = static_cast<std::int64_t>(infer::TokenizerJson::from_json(j, "seed").vocab());
  j["added_tokens"].push_back({{"id", rows + 3}, {"content", "<far>"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", false}, {"special", true}});
  const fs::path file = fs::temp_directory_path() / ("ringattn-gap-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << j.dump();
  const std::string e = error_of([&] { (void)beside(file, rows); });
  fs::remove(file);
  CHECK(has(e, "has ids up to " + std::to_string(rows + 3) + " but the model has " + std::to_string(rows) + " tokens: not this model's tokenizer"));
}
