// `ringattn generate` on a Hugging Face directory that brings its own tokenizer.json: a
// seeded model (tools/write_hf.py) and a small byte-level BPE tokenizer written here (the
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

#include "infer/chat_templates/chat_template.hpp"
#include "infer/common/json.hpp"
#include "infer/tokenizers/tokenizer_json.hpp"
#include "tests/integration/hf_text_model.hpp"
#include "tests/integration/spawn.hpp"

namespace ringattn::itest {

namespace {

namespace fs = std::filesystem;
using infer::Json;
using infer::JsonMap;

using ::test::hf_text::kEot;
using ::test::hf_text::kVocab;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("ringattn-gentext-" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

void write_model(const fs::path& dir) { ::test::hf_text::write_model(dir, 3); }

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
  REQUIRE(prompt_ids.front() == ::test::hf_text::kBos);

  const Json one = run_json(s.dir, prompt, 1, 40);
  const std::vector<int> ids = ids_of(one);
  REQUIRE(ids.size() == 40);  // this seed does not choose its end of text (291) in 40 tokens
  CHECK(one.at("prompt_tokens").get<double>() == static_cast<double>(prompt_ids.size()));
  const std::string want = ::test::hf_text::printed(tok, prompt_ids) + ::test::hf_text::printed(tok, ids);
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
  CHECK(ended.at("text").get<std::string>() == ::test::hf_text::printed(tok, prompt_ids) + ::test::hf_text::printed(tok, head));

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

// Gemma 3's text checkpoints: 262144 rows, and a tokenizer.json whose added <image_soft_token>
// is 262144. An added token right after the model's last row loads; a prompt that holds it is
// refused naming it before any ring forms, and one that does not runs.
TEST_CASE("generate --model DIR: an added token just past the model's rows loads; a prompt holding it is refused naming it") {
  Scratch s;
  write_model(s.dir);
  {
    JsonMap t = infer::parse_json_map([&] {
      std::ifstream f(s.dir / "tokenizer.json");
      return std::string(std::istreambuf_iterator<char>(f), {});
    }());
    t["added_tokens"].push_back({{"id", kVocab}, {"content", "<|img|>"}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
    std::ofstream(s.dir / "tokenizer.json") << t.dump();
  }
  CHECK(run_json(s.dir, "x", 1, 2).at("prompt_tokens").get<double>() == 2);  // BOS and x
  const Outcome r = run_ringattn({"generate", "--model", s.dir.string(), "--prompt", "x<|img|>", "--max-tokens", "2", "--nodes", "2",
                                  "--threads", "1", "--timeout", "60"});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("the text holds \"<|img|>\", token " + std::to_string(kVocab)) != std::string::npos);
  CHECK(r.err.find("past the model's " + std::to_string(kVocab) + " tokens") != std::string::npos);
  CHECK(r.group_empty);
}

TEST_CASE("generate --chat: the prompt is the directory's chat template of the messages, encoded without a second BOS; a template it cannot render is refused naming it") {
  Scratch s;
  write_model(s.dir);
  const infer::TokenizerJson tok = infer::TokenizerJson::load(s.dir / "tokenizer.json", s.dir / "tokenizer_config.json");
  const infer::Json messages = {{{"role", "system"}, {"content", "Be brief. "}}, {{"role", "user"}, {"content", " the world? "}}};
  const infer::Json context = {{"messages", messages}, {"add_generation_prompt", true}, {"tools", nullptr},
                               {"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  const std::string rendered = infer::ChatTemplate::parse(::test::hf_text::kChatTemplate, "t").render(context);
  CHECK(rendered == "<|begin_of_text|><|start|>system\n\nBe brief.<|eot_id|><|start|>user\n\nthe world?<|eot_id|><|start|>assistant\n\n");
  const std::vector<int> prompt_ids = tok.encode(rendered, false);
  REQUIRE(prompt_ids.front() == ::test::hf_text::kBos);
  REQUIRE(std::count(prompt_ids.begin(), prompt_ids.end(), ::test::hf_text::kBos) == 1);
  auto chat = [&](int nodes) {
    const Outcome r = run_ringattn({"generate", "--model", s.dir.string(), "--chat", "--system", "Be brief. ", "--prompt", " the world? ",
                                    "--max-tokens", "12", "--nodes", std::to_string(nodes), "--threads", "1", "--timeout", "60", "--json"});
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    return infer::parse_json(r.out).at("results").at(0);
  };
  const Json one = chat(1);
  CHECK(one.at("prompt_tokens").get<double>() == static_cast<double>(prompt_ids.size()));
  CHECK(one.at("text").get<std::string>() == ::test::hf_text::printed(tok, prompt_ids) + ::test::hf_text::printed(tok, ids_of(one)));
  CHECK(ids_of(chat(2)) == ids_of(one));
  // The same conversation as a "messages" line of a packed batch, beside a text prompt.
  const fs::path batch = s.dir / "prompts.jsonl";
  std::ofstream(batch) << R"({"id": "t", "text": "hi"})" << "\n" << infer::Json{{"id", "c"}, {"messages", messages}}.dump() << "\n";
  auto batch_run = [&] {
    return run_ringattn({"generate", "--model", s.dir.string(), "--prompts", batch.string(), "--max-tokens", "12", "--nodes", "2",
                         "--threads", "1", "--timeout", "60", "--json"});
  };
  {
    const Outcome r = batch_run();
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    const Json results = infer::parse_json(r.out).at("results");
    REQUIRE(results.size() == 2);
    CHECK(results[1].at("prompt_tokens").get<double>() == static_cast<double>(prompt_ids.size()));
    CHECK(ids_of(results[1]) == ids_of(one));
    CHECK(results[1].at("text").get<std::string>() == one.at("text").get<std::string>());
  }

  // A template this runtime cannot render: --chat is refused naming the file and the line;
  // a plain prompt still runs.
  infer::Json config = infer::parse_json([&] {
    std::ifstream f(s.dir / "tokenizer_config.json");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }());
  config["chat_template"] = "{% for m in messages %}\n{{ m.content | wordcount }}{% endfor %}";
  std::ofstream(s.dir / "tokenizer_config.json") << config.dump();
  const Outcome refused = run_ringattn({"generate", "--model", s.dir.string(), "--chat", "--prompt", "hi", "--max-tokens", "2", "--nodes",
                                        "1", "--threads", "1", "--timeout", "60"});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("tokenizer_config.json: line 2: the filter 'wordcount' is not implemented") != std::string::npos);
  CHECK(refused.group_empty);
  const Outcome batch_refused = batch_run();
  CHECK(batch_refused.exit_code != 0);
  CHECK(batch_refused.err.find("prompts.jsonl line 2") != std::string::npos);
  CHECK(batch_refused.err.find("the filter 'wordcount' is not implemented") != std::string::npos);
  CHECK(run_json(s.dir, "hi", 1, 2).at("prompt_tokens").get<double>() == static_cast<double>(tok.encode("hi", true).size()));
}

}  // namespace ringattn::itest
