// `ringattn generate` with a real pretrained model (stories260K, never in this repository:
// RINGATTN_MODEL_DIR or ../shared/models beside the checkout, else "skipped: no model at
// ..."): llama2.c's recorded greedy texts byte for byte at P = 1-4 and every layout the
// prompt allows, seeded sampling equal across P, the positions trap caught, several prompts
// packed, --json, a ring joined from the environment, and failures that name the rank.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "infer/common/json.hpp"
#include "tests/integration/spawn.hpp"
#include "tests/model/model_files.hpp"

namespace ringattn::itest {
using infer::Json;
using infer::parse_json;
namespace {

std::vector<std::string> generate(const std::filesystem::path& dir, std::vector<std::string> more) {
  std::vector<std::string> a = {"generate", "--model", (dir / "stories260K.bin").string(), "--tokenizer",
                                (dir / "tok512.bin").string(), "--threads", "1", "--timeout", "60"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// stdout of a run that must succeed.
std::string text_of(const std::filesystem::path& dir, const std::vector<std::string>& more) {
  const Outcome r = run_ringattn(generate(dir, more));
  INFO("generate " << more.size() << " args; stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.group_empty);
  return r.out;
}

std::string nodes(int p) { return std::to_string(p); }

}  // namespace

TEST_CASE("generate: llama2.c's greedy text for \"Once upon a time\", byte for byte, at P = 1-4 and every layout") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  // run.c -n 64: 4 prompt tokens and 60 generated; it prints a final newline, as generate does.
  for (int p = 1; p <= 4; ++p)
    for (const char* layout : {"balanced", "contiguous", "striped", "zigzag"}) {
      if (std::string(layout) == "zigzag" && 2 * p > 5) continue;  // 5 tokens cut into 2P chunks: below
      INFO("P " << p << ", layout " << layout);
      CHECK(text_of(*dir, {"--prompt", "Once upon a time", "--max-tokens", "60", "--nodes", nodes(p), "--layout", layout}) ==
            ::test::kRunText + "\n");
    }
  // run.c -n 256: 252 generated, README's and llama2.c's doc sample.
  for (int p : {1, 3}) {
    INFO("256 positions at P " << p);
    CHECK(text_of(*dir, {"--prompt", "Once upon a time", "--max-tokens", "252", "--nodes", nodes(p), "--layout", "striped"}) ==
          ::test::kGreedy256Text);
  }
}

TEST_CASE("generate --weights-dtype bf16: the model's matrices rounded to bf16 give one text at P = 1-4 and every layout") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  const Outcome one = run_ringattn(generate(*dir, {"--prompt", "Once upon a time", "--max-tokens", "60", "--nodes", "1",
                                                    "--weights-dtype", "bf16", "--json"}));
  INFO("stderr: " << one.err);
  REQUIRE(one.exit_code == 0);
  const Json j = parse_json(one.out);
  CHECK(j.at("weights_dtype").get<std::string>() == "bf16");
  const std::string text = j.at("results")[0].at("text").get<std::string>();
  CHECK(text.size() > 100);  // the story goes on: rounding the weights keeps the model a model
  for (int p = 2; p <= 4; ++p)
    for (const char* layout : {"balanced", "contiguous", "striped"}) {
      INFO("P " << p << ", layout " << layout);
      CHECK(text_of(*dir, {"--prompt", "Once upon a time", "--max-tokens", "60", "--nodes", nodes(p), "--layout", layout,
                           "--weights-dtype", "bf16"}) == text + "\n");
    }
}

TEST_CASE("generate --weights-dtype fp16: the matrices as IEEE halves give one text at P = 1-3") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  const Outcome one = run_ringattn(generate(*dir, {"--prompt", "Once upon a time", "--max-tokens", "60", "--nodes", "1",
                                                    "--weights-dtype", "fp16", "--json"}));
  INFO("stderr: " << one.err);
  REQUIRE(one.exit_code == 0);
  const Json j = parse_json(one.out);
  CHECK(j.at("weights_dtype").get<std::string>() == "fp16");
  const std::string text = j.at("results")[0].at("text").get<std::string>();
  CHECK(text.size() > 100);
  for (int p = 2; p <= 3; ++p)
    for (const char* layout : {"balanced", "striped"}) {
      INFO("P " << p << ", layout " << layout);
      CHECK(text_of(*dir, {"--prompt", "Once upon a time", "--max-tokens", "60", "--nodes", nodes(p), "--layout", layout,
                           "--weights-dtype", "fp16"}) == text + "\n");
    }
}

TEST_CASE("generate --json: each rank reports the weights it holds (bf16 half of fp32's), its KV cache and its peak RSS") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  auto rank0 = [&](const char* dtype) {
    const Outcome r = run_ringattn(generate(*dir, {"--prompt", "Once upon a time", "--max-tokens", "20", "--nodes", "2",
                                                   "--weights-dtype", dtype, "--json"}));
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    const Json j = parse_json(r.out);
    REQUIRE(j.at("ranks").size() == 2);
    return j.at("ranks")[0];
  };
  const Json f = rank0("fp32"), b = rank0("bf16"), h = rank0("fp16");
  const double wf = f.at("weight_bytes").get<double>(), wb = b.at("weight_bytes").get<double>();
  // stories260K: 260K parameters, tied head counted once; the norms (fp32 in both) are 0.3% of it.
  CHECK(wf > 4 * 250e3);
  CHECK(wf < 4 * 330e3);  // the packed panels' padding is small
  CHECK(wb / wf == doctest::Approx(0.5).epsilon(0.02));
  CHECK(h.at("weight_bytes").get<double>() == wb);  // fp16: 2 bytes a weight, as bf16
  for (const Json* r : {&f, &b}) {
    const double kv = r->at("kv_cache_bytes").get<double>(), rss = r->at("peak_rss_bytes").get<double>();
    CHECK(kv > 0);
    CHECK(rss > r->at("weight_bytes").get<double>() + kv);
  }
}

TEST_CASE("generate --tp: tensor-parallel groups (a 2 x 2 mesh, 4 x 1, 2 x 1) give llama2.c's greedy text; a rank holds 1/T of the weights") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  // stories260K: 8 query heads, 4 K/V heads, ffn 172, vocab 512: every T of 2 and 4 splits it.
  for (const auto& [p, tp] : {std::pair{4, 2}, {2, 2}, {4, 4}})
    for (const char* layout : {"balanced", "striped"}) {
      INFO("P " << p << ", tp " << tp << ", layout " << std::string(layout));
      CHECK(text_of(*dir, {"--prompt", "Once upon a time", "--max-tokens", "60", "--nodes", nodes(p), "--tp", nodes(tp),
                           "--layout", layout}) == ::test::kRunText + "\n");
    }
  auto weights = [&](int p, int tp) {
    const Outcome r = run_ringattn(generate(*dir, {"--prompt", "Once upon a time", "--max-tokens", "8", "--nodes", nodes(p),
                                                   "--tp", nodes(tp), "--json"}));
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    const Json j = parse_json(r.out);
    REQUIRE(j.at("ranks").size() == static_cast<std::size_t>(p));
    CHECK(j.at("tp").get<int>() == tp);
    CHECK(j.at("results").size() == 1);  // one text: a group's ranks speak once
    return j.at("ranks")[0].at("weight_bytes").get<double>();
  };
  const double one = weights(2, 1), two = weights(4, 2);
  CHECK(two / one == doctest::Approx(0.5).epsilon(0.03));  // the norms (whole on every rank) are 0.3 %
  // A --tp that does not divide the ranks, or the model's heads, is refused before anything runs.
  const Outcome bad = run_ringattn(generate(*dir, {"--prompt", "x", "--nodes", "3", "--tp", "2"}));
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("--tp 2 must divide --nodes 3") != std::string::npos);
  const Outcome heads = run_ringattn(generate(*dir, {"--prompt", "x", "--nodes", "3", "--tp", "3"}));
  CHECK(heads.exit_code != 0);
  CHECK(heads.err.find("8 query heads do not split in 3") != std::string::npos);
}

TEST_CASE("generate: zigzag at P = 3 and 4 (a prompt of at least 2P tokens) gives P = 1's text") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  const std::vector<std::string> prompt = {"--prompt", "Once upon a time, there was a little girl named Lily.", "--max-tokens", "40"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), prompt.begin(), prompt.end());
    return text_of(*dir, more);
  };
  const std::string one = with({"--nodes", "1"});
  CHECK(one.rfind("Once upon a time, there was a little girl named Lily.", 0) == 0);
  CHECK(one.size() > 60);
  for (int p : {3, 4}) {
    INFO("P " << p);
    CHECK(with({"--nodes", nodes(p), "--layout", "zigzag"}) == one);
  }
}

TEST_CASE("generate: seeded sampling is llama2.c's at P = 1 and the same text at every P") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  // run.c -t 1.0 -p 0.9 -s 133742 with no prompt: BOS alone, 256 steps (one token: one rank).
  CHECK(text_of(*dir, {"--prompt", "", "--max-tokens", "256", "--temperature", "1.0", "--top-p", "0.9", "--seed", "133742"}) ==
        ::test::kSeededText);
  const std::vector<std::string> sampled = {"--prompt", "Once upon a time", "--max-tokens", "120", "--temperature", "1.0", "--seed", "42"};
  auto at = [&](int p) {
    std::vector<std::string> a = sampled;
    a.insert(a.end(), {"--nodes", nodes(p)});
    return text_of(*dir, a);
  };
  const std::string one = at(1);
  CHECK(one != ::test::kRunText + "\n");  // sampled, not greedy
  CHECK(one.size() > 100);
  for (int p = 2; p <= 4; ++p) {
    INFO("P " << p);
    CHECK(at(p) == one);
  }
  // A temperature below the sampler's floor is greedy: a denormal 1e-45 made every logit / T
  // inf and every token <unk>.
  for (const char* t : {"1e-45", "0.0001"})
    CHECK(text_of(*dir, {"--prompt", "Once upon a time", "--max-tokens", "60", "--temperature", t, "--seed", "42"}) ==
          ::test::kRunText + "\n");
}

TEST_CASE("generate: no prompt (BOS alone: fewer tokens than ranks) gives llama2.c's greedy and seeded text at P = 2 and 4") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  for (int p : {2, 4}) {
    INFO("P " << p);
    CHECK(text_of(*dir, {"--prompt", "", "--max-tokens", "256", "--nodes", nodes(p)}) == ::test::kGreedy256Text);
    CHECK(text_of(*dir, {"--prompt", "", "--max-tokens", "256", "--temperature", "1.0", "--top-p", "0.9", "--seed", "133742",
                         "--nodes", nodes(p)}) == ::test::kSeededText);
  }
}

TEST_CASE("generate: the positions trap (RoPE at each rank's row index) changes the text across ranks") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  const std::vector<std::string> base = {"--prompt", "Once upon a time, there was a little girl named Lily.", "--max-tokens", "40"};
  auto run = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return text_of(*dir, more);
  };
  const std::string right = run({"--nodes", "1"});
  // One rank: the row index is the position, so the trap cannot show...
  CHECK(run({"--nodes", "1", "--rope-positions", "local"}) == right);
  // ...across ranks it must, or the tests of exactness above would prove nothing.
  CHECK(run({"--nodes", "2", "--layout", "contiguous", "--rope-positions", "local"}) != right);
  CHECK(run({"--nodes", "4", "--layout", "zigzag", "--rope-positions", "local"}) != right);
  CHECK(run({"--nodes", "4", "--layout", "zigzag"}) == right);
}

TEST_CASE("generate --json: the text, the token ids run.c printed, and the figures") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  const std::string out = text_of(*dir, {"--prompt", "Once upon a time", "--max-tokens", "60", "--nodes", "2", "--json"});
  const Json j = parse_json(out);
  REQUIRE(infer::json_field(j, "results"));
  REQUIRE(j.at("results").size() == 1);
  const Json& r = j.at("results")[0];
  CHECK(r.at("text").get<std::string>() == ::test::kRunText);
  CHECK(r.at("prompt_tokens").get<double>() == 5);
  std::vector<int> ids;
  for (const Json& t : r.at("tokens")) ids.push_back(static_cast<int>(t.get<double>()));
  CHECK(ids == std::vector<int>(::test::kRunIds.begin() + 4, ::test::kRunIds.end()));
  CHECK(j.at("nodes").get<double>() == 2);
  CHECK(j.at("decode_steps").get<double>() == 59);
  CHECK(j.at("prefill_tokens_per_s").get<double>() > 0);
  CHECK(j.at("time_to_first_token_seconds").get<double>() > 0);
  CHECK(j.at("ranks").size() == 2);
}

TEST_CASE("generate --prompts: a packed batch of text and token prompts gives each its text alone") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  const auto file = std::filesystem::temp_directory_path() / ("ringattn-generate-" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream f(file);
    f << "{\"id\": \"a\", \"text\": \"Once upon a time\"}\n{\"id\": 7, \"text\": \"The little dog\"}\n"
         "{\"id\": \"c\", \"tokens\": [1, 403, 407, 261, 378]}\n";
  }
  auto results = [&](int p) {
    const Json j = parse_json(text_of(*dir, {"--prompts", file.string(), "--max-tokens", "60", "--nodes", nodes(p), "--json"}));
    std::vector<std::string> texts;
    for (const Json& r : j.at("results")) texts.push_back(r.at("text").get<std::string>());
    return texts;
  };
  const std::vector<std::string> one = results(1);
  REQUIRE(one.size() == 3);
  CHECK(one[0] == ::test::kRunText);
  CHECK(one[2] == ::test::kRunText);  // the same prompt as token ids
  CHECK(one[1].rfind("The little dog", 0) == 0);
  for (int p : {2, 3}) {
    INFO("P " << p);
    CHECK(results(p) == one);
  }
  {  // every prompt decoded on rank 0, as the daemons decode (the holders send it their last rows)
    const Json j = parse_json(
        text_of(*dir, {"--prompts", file.string(), "--max-tokens", "60", "--nodes", "3", "--json", "--decode-rank", "0"}));
    std::vector<std::string> texts;
    for (const Json& r : j.at("results")) texts.push_back(r.at("text").get<std::string>());
    CHECK(texts == one);
  }
  std::filesystem::remove(file);
}

TEST_CASE("generate --from-env: two ranks started by hand; the rank owning the prompt prints its text") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  const Env env = {{"RINGATTN_WORLD_SIZE", "2"},
                   {"RINGATTN_MASTER", "127.0.0.1:" + std::to_string(free_port())},
                   {"RINGATTN_TOKEN", "0123456789abcdef0123456789abcdef"}};
  const std::vector<std::string> args = generate(*dir, {"--prompt", "Once upon a time", "--max-tokens", "60", "--from-env"});
  Env e0 = env, e1 = env;
  e0.emplace_back("RINGATTN_RANK", "0");
  e1.emplace_back("RINGATTN_RANK", "1");
  Spawned r0(args, e0), r1(args, e1);
  const Outcome o1 = r1.wait(90), o0 = r0.wait(90);
  INFO("rank 0: " << o0.err << "\nrank 1: " << o1.err);
  REQUIRE(o0.exit_code == 0);
  REQUIRE(o1.exit_code == 0);
  CHECK(o0.out + o1.out == ::test::kRunText + "\n");  // one of them owns the prompt's last token
}

namespace {
// The pid of `generate`'s rank `rank`, a child of the launcher `parent`; -1 if none (yet).
pid_t member_pid(pid_t parent, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) continue;
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent || state == 'Z') continue;
    std::ifstream cmd(entry.path() / "cmdline");
    std::vector<std::string> argv;
    for (std::string a; std::getline(cmd, a, '\0');) argv.push_back(a);
    for (std::size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--member" && argv[i + 1] == std::to_string(rank)) return std::stoi(name);
  }
  return -1;
}
}  // namespace

TEST_CASE("generate: a rank killed mid-generation fails the run naming it; no process is left") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  Spawned g(generate(*dir, {"--prompt", "Once upon a time", "--max-tokens", "480", "--nodes", "3", "--timeout", "10"}));
  // Once text streams, the ranks are decoding: kill rank 1.
  for (int i = 0; i < 600 && g.pump() && g.out().size() < 40; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const pid_t victim = member_pid(g.pid(), 1);
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  const Outcome r = g.wait(120);
  INFO("stderr: " << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.group_empty);
  CHECK(r.err.find("rank 1") != std::string::npos);
}

TEST_CASE("generate: bad input fails before the ring forms, naming the file and the rank") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  Outcome r = run_ringattn({"generate", "--model", "/nonexistent/stories.bin", "--tokenizer", (*dir / "tok512.bin").string(),
                            "--prompt", "x", "--nodes", "2", "--timeout", "20"});
  CHECK(r.exit_code != 0);
  CHECK(r.group_empty);
  CHECK(r.err.find("/nonexistent/stories.bin") != std::string::npos);
  CHECK(r.err.find("rank") != std::string::npos);
  r = run_ringattn(generate(*dir, {"--prompt", "Once upon a time", "--max-tokens", "600"}));
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("trained context of 512") != std::string::npos);
  r = run_ringattn(generate(*dir, {"--max-tokens", "5"}));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--prompt") != std::string::npos);
  // Counts past 32 bits are usage errors naming the option and its range (2^32 + 2 ran as 2, 2^32 + 1
  // as 1); a random prompt needs at least one token ("0" went on to open a prompts file "").
  const std::vector<std::vector<std::string>> usage = {
      {"--prompt", "x", "--tp", "4294967298"}, {"--prompt", "x", "--nodes", "4294967298"}, {"--prompt", "x", "--threads", "4294967297"},
      {"--random-prompt", "0"}, {"--random-prompt", "-1"}, {"--prompt", "x", "--max-tokens", "4294967297"}};
  for (const auto& args : usage) {
    r = run_ringattn(generate(*dir, args));
    INFO(args[args.size() - 2] << " " << args.back() << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(args[args.size() - 2] + " takes a whole number in [") != std::string::npos);
    CHECK(r.err.find("got '" + args.back() + "'") != std::string::npos);
  }
  // A random prompt is bounded before a token is drawn (2^30 tokens took 26 s and more than
  // 4 GiB a rank, then std::bad_alloc).
  r = run_ringattn(generate(*dir, {"--random-prompt", "1073741824", "--max-tokens", "4"}), {}, 30);
  CHECK(r.exit_code != 0);
  CHECK(r.wall_seconds < 20);  // a hang guard: the refusal comes before any allocation
  CHECK(r.err.find("--random-prompt 1073741824 is longer than the model's trained context of 512") != std::string::npos);
  // A prompts file whose number overflows a double names the file and the line, as every
  // other bad line does (nlohmann's own exception escaped the reader's handler).
  const std::filesystem::path big = std::filesystem::temp_directory_path() / ("ringattn-big-id-" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(big) << "{\"id\": 1e400, \"tokens\": [1]}\n";
  r = run_ringattn(generate(*dir, {"--prompts", big.string(), "--max-tokens", "4"}));
  std::filesystem::remove(big);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find(big.string() + " line 1") != std::string::npos);
  CHECK(r.err.find("number overflow") != std::string::npos);
}

}  // namespace ringattn::itest
