// tokenizer.json files that must be refused, and what the small tokenizers of the fuzz seed
// corpus do (no oracle needed: their vocabularies are a few hundred pieces written by hand,
// so the expected ids follow from the merges). Each hostile file is a good one with one
// field broken; the refusal names the file and the field, and is a FileError.
#include <doctest/doctest.h>

#include <ringattn/error.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "infer/tokenizers/tokenizer_json.hpp"
#include "tests/error_of.hpp"

namespace {

namespace fs = std::filesystem;
using infer::JsonMap;
using infer::TokenizerJson;
using ringattn::test::error_of;

const fs::path kSeeds = RINGATTN_SOURCE_ROOT "/tests/fuzz/corpus/tokenizer_json";

JsonMap seed(const char* name) {
  std::ifstream f(kSeeds / name);
  return infer::parse_json_map(std::string(std::istreambuf_iterator<char>(f), {}));
}

// The error of loading `j` (from_json), "" if it loaded; every refusal must be a FileError.
std::string refusal(const JsonMap& j) {
  try {
    (void)TokenizerJson::from_json(j, "bad.json");
  } catch (const ringattn::FileError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

}  // namespace

TEST_CASE("tokenizer.json: the fuzz seeds' tokenizers: merges by rank, byte fallback, added tokens, post-processor, decode") {
  const TokenizerJson b = TokenizerJson::load(kSeeds / "tiny-byte-level.json");
  CHECK(b.byte_level());
  const int the = *b.id_of("\xc4\xa0the");  // "Ġthe": Ġt + he
  const int end = *b.id_of("<|end|>");
  CHECK(b.special(end));
  CHECK(b.encode(" the", false) == std::vector<int>{the});
  CHECK(b.encode(" the", true) == std::vector<int>{end, the});  // TemplateProcessing puts <|end|> first
  CHECK(b.encode("x<|end|>y", false) == std::vector<int>{'x', end, 'y'});  // bytes below '!' map elsewhere; x, y are themselves
  CHECK(b.decode(b.encode("caf\xc3\xa9 \xf0\x9f\x98\x80 the", false)) == "caf\xc3\xa9 \xf0\x9f\x98\x80 the");
  CHECK(b.decode(b.encode("\xff", false)) == "\xef\xbf\xbd");  // ill-formed UTF-8 read as U+FFFD
  CHECK(b.decode(std::vector<int>{end, the}, true) == " the");
  CHECK_THROWS_AS(b.decode(std::vector<int>{static_cast<int>(b.vocab())}), std::out_of_range);

  const TokenizerJson s = TokenizerJson::load(kSeeds / "tiny-sentencepiece.json");
  CHECK_FALSE(s.byte_level());
  const int bos = *s.id_of("<s>");
  const int space_the = *s.id_of("\xe2\x96\x81the");
  // "Hi": not in the vocabulary: byte fallback <0x48> <0x69>; the leading ▁ is its own piece.
  CHECK(s.encode("the Hi", true) == std::vector<int>{bos, space_the, *s.id_of("\xe2\x96\x81"), *s.id_of("<0x48>"), *s.id_of("<0x69>")});
  CHECK(s.decode(s.encode("the Hi", true)) == "<s> the Hi");  // Strip looks at the fused text, which starts "<s>"
  CHECK(s.decode(s.encode("the Hi", false)) == "the Hi");
  CHECK(s.decode(std::vector<int>{*s.id_of("<0xC3>")}) == "\xef\xbf\xbd");  // half a character: one U+FFFD per byte
  CHECK(s.digest() != b.digest());

  // Gemma 3's shape: spaces replaced by U+2581 and no leading one, a Split on " " that finds
  // none left, added tokens found in the raw text ("\n", a written-out U+2581 U+2581), no Strip.
  const TokenizerJson g = TokenizerJson::load(kSeeds / "tiny-gemma.json");
  const auto id = [&](const char* p) { return *g.id_of(p); };
  const std::string the_ = "\xe2\x96\x81the", mark = "\xe2\x96\x81", marks = mark + mark;
  CHECK(g.encode("the the", false) == std::vector<int>{id("t"), id("he"), id(the_.c_str())});
  CHECK(g.decode(g.encode("the the", true)) == "<s>the the");
  CHECK(g.encode("a" + marks + "a", false) == std::vector<int>{id("a"), id(marks.c_str()), id("a")});  // the added token
  CHECK(g.encode("a  a", false) == std::vector<int>{id("a"), id(mark.c_str()), id(mark.c_str()), id("a")});  // no merge joins them
  CHECK(g.encode("x\ny", false) == std::vector<int>{id("<0x78>"), id("\n"), id("<0x79>")});
  CHECK(g.decode(g.encode(" caf\xc3\xa9\n\n", true), true) == " caf\xc3\xa9\n\n");
  CHECK(g.digest() != s.digest());
}

// A Split on a literal (split_delimiter.hpp) as the pre-tokenizer of the SentencePiece seed:
// "the" is normalized to "\u2581the", which its merges make one token. Split on "h" first,
// each behavior makes its own words ("\u2581t" "h" "e" as the pattern's non-match, match,
// non-match; inverted, the other way round) and so its own tokens, and its own digest.
TEST_CASE("tokenizer.json: a Split on a String runs each behavior of the library, and invert") {
  const JsonMap sp = seed("tiny-sentencepiece.json");
  const std::string the = "\xe2\x96\x81the", t = "\xe2\x96\x81t";
  struct Want {
    const char* behavior;
    bool invert;
    std::vector<std::string> pieces;
  };
  const Want wants[] = {
      {nullptr, false, {the}},  // no pre-tokenizer
      {"Removed", false, {t, "e"}},
      {"Isolated", false, {t, "h", "e"}},
      {"MergedWithPrevious", false, {t, "h", "e"}},  // "\u2581th" "e"
      {"MergedWithNext", false, {t, "he"}},
      {"Contiguous", false, {t, "h", "e"}},
      {"Removed", true, {"h"}},
      {"MergedWithPrevious", true, {t, "he"}},
  };
  std::vector<std::uint64_t> digests;
  for (const Want& w : wants) {
    CAPTURE(w.behavior);
    CAPTURE(w.invert);
    JsonMap j = sp;
    if (w.behavior) j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "h"}}}, {"behavior", w.behavior}, {"invert", w.invert}};
    const TokenizerJson tok = TokenizerJson::from_json(j, "sp.json");
    std::vector<int> want;
    for (const std::string& p : w.pieces) want.push_back(*tok.id_of(p));
    CHECK(tok.encode("the", false) == want);
    CHECK(tok.decode(tok.encode("the", false)) == (w.behavior && std::string_view(w.behavior) == "Removed" ? (w.invert ? "h" : "te") : "the"));
    digests.push_back(tok.digest());
  }
  std::sort(digests.begin(), digests.end());
  CHECK(std::unique(digests.begin(), digests.end()) == digests.end());
}

// A refusal that follows the file's size: one id of 2^24 - 1 in a small file is refused
// before a table by id is sized (it cost 580 MiB first). Measured as the cause, not a time: a
// child process whose address space may grow by 64 MiB at most still gets the FileError.
TEST_CASE("tokenizer.json: a huge id in a small file is refused within 64 MiB of memory") {
  JsonMap j = seed("tiny-byte-level.json");
  j["model"]["vocab"]["zz"] = (1 << 24) - 1;
  REQUIRE(j.dump().size() < 16384);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;  // the address space in use now
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (64u << 20);
    const rlimit limit{cap, cap};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(4);
    try {
      (void)TokenizerJson::from_json(j, "big.json");
    } catch (const ringattn::FileError& e) {
      // 3: another refusal, such as std::bad_alloc as from_json words it (the tables sized by the id first)
      ::_exit(has(e.what(), "ids must stay below twice the number of tokens") ? 0 : 3);
    } catch (const std::bad_alloc&) {
      ::_exit(1);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(5);  // loaded
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("tokenizer.json: hostile and unsupported files are refused naming the field") {
  const JsonMap good = seed("tiny-byte-level.json");
  REQUIRE(refusal(good).empty());
  struct Case {
    const char* what;
    std::function<void(JsonMap&)> breaks;
    const char* says;
  };
  const Case cases[] = {
      {"not an object", [](JsonMap& j) { j = JsonMap::array(); }, "not a JSON object"},
      {"no model", [](JsonMap& j) { j.erase("model"); }, "has no \"model\""},
      {"a Unigram model", [](JsonMap& j) { j["model"]["type"] = "Unigram"; }, "only BPE"},
      {"dropout", [](JsonMap& j) { j["model"]["dropout"] = 0.1; }, "model.dropout is set"},
      {"a subword prefix", [](JsonMap& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "continuing_subword_prefix"},
      {"an id out of range", [](JsonMap& j) { j["model"]["vocab"]["zz"] = 1 << 30; }, "must be an integer in"},
      {"a negative id", [](JsonMap& j) { j["model"]["vocab"]["zz"] = -1; }, "must be an integer in"},
      {"an id far past the others", [](JsonMap& j) { j["model"]["vocab"]["zz"] = (1 << 24) - 1; }, "ids must stay below twice the number of tokens"},
      {"an added id far past the others", [](JsonMap& j) { j["added_tokens"][0]["id"] = (1 << 24) - 1; }, "an id of 16777215 among"},
      {"an id given twice", [](JsonMap& j) { j["model"]["vocab"]["zz"] = 5; }, "gives id 5 to both"},
      {"a fractional id", [](JsonMap& j) { j["model"]["vocab"]["zz"] = 5.5; }, "must be an integer"},
      {"a merge of unknown pieces", [](JsonMap& j) { j["model"]["merges"].push_back(JsonMap::array({"q", "zzz"})); }, "is not in model.vocab"},
      {"a merge whose result is no piece", [](JsonMap& j) { j["model"]["merges"].push_back(JsonMap::array({"q", "q"})); }, "\"qq\" is not in model.vocab"},
      {"a merge string of three", [](JsonMap& j) { j["model"]["merges"].push_back("a b c"); }, "not two pieces"},
      {"a merge of another type", [](JsonMap& j) { j["model"]["merges"].push_back(7); }, "neither"},
      {"a missing byte piece", [](JsonMap& j) { j["model"]["vocab"].erase("A"); }, "lacks the piece \"A\" of byte 65"},
      {"another regex", [](JsonMap& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; }, "is not one this runtime implements"},
      {"a Split that removes", [](JsonMap& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }, "behavior is not \"Isolated\""},
      {"a Split on an empty String", [](JsonMap& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", ""}}; }, "pattern.String is not a non-empty string"},
      {"a Split of no known behavior", [](JsonMap& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}}; j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Merged"; },
       "behavior \"Merged\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous"},
      {"a Split without a pattern", [](JsonMap& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = JsonMap::object(); }, "neither pattern.String nor pattern.Regex"},
      {"a Split after ByteLevel", [](JsonMap& j) { j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}}); },
       "Split after a ByteLevel pre-tokenizer is not implemented"},
      {"a regex Split without ByteLevel", [](JsonMap& j) { j["pre_tokenizer"] = JsonMap(j["pre_tokenizer"]["pretokenizers"][0]); },
       "Split on a regex without ByteLevel after it is not implemented"},
      {"a ByteLevel with its own regex", [](JsonMap& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; }, "use_regex is true"},
      {"a Whitespace pre-tokenizer", [](JsonMap& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer \"Whitespace\" is not implemented"},
      {"an NFKC normalizer", [](JsonMap& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "normalizer \"NFKC\" is not implemented"},
      {"a WordPiece decoder", [](JsonMap& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "ByteLevel expected"},
      {"an added token that strips", [](JsonMap& j) { j["added_tokens"][0]["lstrip"] = true; }, "lstrip is true"},
      {"an added token normalized", [](JsonMap& j) { j["added_tokens"][0]["normalized"] = true; }, "normalized is true"},
      {"an added token without content", [](JsonMap& j) { j["added_tokens"][0]["content"] = ""; }, "content is empty"},
      {"an added token on another's id", [](JsonMap& j) { j["added_tokens"][0]["id"] = 65; }, "which model.vocab gives to"},
      {"a template of an unknown token", [](JsonMap& j) { j["post_processor"]["special_tokens"].erase("<|end|>"); }, "no entry for it"},
      {"a template id that is no token", [](JsonMap& j) { j["post_processor"]["special_tokens"]["<|end|>"]["ids"][0] = 999999; }, "which is no token"},
      {"a template without the text", [](JsonMap& j) { j["post_processor"]["single"].erase(1); }, "no Sequence A"},
      {"a pair-only processor", [](JsonMap& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; }, "not implemented"},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    JsonMap j = good;
    c.breaks(j);
    const std::string m = refusal(j);
    CHECK(has(m, "bad.json"));
    CHECK(has(m, c.says));
  }
  // The SentencePiece kind: its decoder and fallback must be the ones it is run with.
  const JsonMap sp = seed("tiny-sentencepiece.json");
  REQUIRE(refusal(sp).empty());
  JsonMap j = sp;
  j["decoder"]["decoders"].erase(1);  // no ByteFallback
  CHECK(has(refusal(j), "not Replace, ByteFallback, Fuse"));
  j = sp;
  j["model"]["vocab"].erase("<0x41>");
  CHECK(has(refusal(j), "lacks the piece \"<0x41>\""));
  j = sp;
  j["model"]["byte_fallback"] = false;
  j["model"]["unk_token"] = nullptr;
  CHECK(has(refusal(j), "neither byte_fallback nor unk_token"));
  // Files: not JSON, too deep, missing.
  const fs::path dir = fs::temp_directory_path() / "ringattn-tokjson-hostile";
  fs::create_directories(dir);
  std::ofstream(dir / "broken.json") << "{\"model\": {";
  CHECK(has(error_of([&] { (void)TokenizerJson::load(dir / "broken.json"); }), "not valid JSON"));
  std::ofstream(dir / "deep.json") << std::string(100, '[') << std::string(100, ']');
  CHECK(has(error_of([&] { (void)TokenizerJson::load(dir / "deep.json"); }), "nested deeper"));
  CHECK(has(error_of([&] { (void)TokenizerJson::load(dir / "absent.json"); }), "absent.json"));
  std::ofstream(dir / "tokenizer_config.json") << "{\"clean_up_tokenization_spaces\": \"yes\"}";
  CHECK(has(error_of([&] { (void)TokenizerJson::load(kSeeds / "tiny-byte-level.json", dir / "tokenizer_config.json"); }),
            "clean_up_tokenization_spaces is not a boolean"));
  fs::remove_all(dir);
}
