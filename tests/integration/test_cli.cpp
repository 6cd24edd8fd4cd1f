// The command line as a new user meets it, on the real binary: usage and help, the one
// count grammar and dtype vocabulary, --threads 0, --log-level / SPDLOG_LEVEL / --quiet,
// what verify claims, --json and exit codes, and bench overlap --replot.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "infer/common/json.hpp"
#include "tests/integration/cli_json.hpp"
#include "tests/integration/ring_case.hpp"

namespace ringattn::itest {
using infer::Json;
using infer::parse_json;
namespace {

// A ring small enough to cost a fraction of a second.
std::vector<std::string> small_verify(std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"verify", "--seq", "256", "--heads", "2", "--kv-heads", "1", "--head-dim", "32",
                                "--nodes", "2", "--timeout", "20"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// Every command, as its words ("bench ring" -> {"bench", "ring"}), read from `ringattn
// help`: the rows under "commands:" name a command in their first one or two words.
std::vector<std::vector<std::string>> every_command() {
  std::vector<std::vector<std::string>> out;
  bool in_list = false;
  for (const auto& line : lines_of(run_ringattn({"help"}).out)) {
    if (line == "commands:") {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (line.empty()) break;
    const std::size_t at = line.find_first_not_of(' ');
    const std::size_t name_end = line.find("  ", at);  // the summary starts after two spaces
    const std::string name = line.substr(at, name_end - at);
    const auto sp = name.find(' ');
    if (name == "help") continue;
    out.push_back(sp == std::string::npos ? std::vector<std::string>{name}
                                          : std::vector<std::string>{name.substr(0, sp), name.substr(sp + 1)});
  }
  return out;
}

const char* const kBench[] = {"bench kernel", "bench transport", "bench ring", "bench overlap"};

}  // namespace

TEST_CASE("cli: help, help <command>, and a command group print usage") {
  const Outcome top = run_ringattn({"help"});
  CHECK(top.exit_code == 0);
  CHECK(has(top.out, "usage: ringattn <command>"));
  CHECK(has(top.out, "exit codes:"));
  for (const char* b : kBench) CHECK(has(top.out, b));

  for (const auto& args : {std::vector<std::string>{"help", "bench"}, std::vector<std::string>{"bench", "--help"}}) {
    const Outcome o = run_ringattn(args);
    INFO(args[0] << " " << args[1] << ": " << o.out << o.err);
    CHECK(o.exit_code == 0);
    for (const char* b : kBench) CHECK(has(o.out, b));
    CHECK_FALSE(has(o.out, "  run "));
  }
  const Outcome bare = run_ringattn({"bench"});  // a group without its command: usage, exit 2
  CHECK(bare.exit_code == 2);
  for (const char* b : kBench) CHECK(has(bare.err, b));

  const Outcome help_run = run_ringattn({"help", "run"});
  CHECK(help_run.exit_code == 0);
  CHECK(has(help_run.out, "usage: ringattn run [options]"));
  CHECK(help_run.out == run_ringattn({"run", "--help"}).out);
  const Outcome help_ring = run_ringattn({"help", "bench", "ring"});
  CHECK(help_ring.exit_code == 0);
  CHECK(has(help_ring.out, "usage: ringattn bench ring [options]"));

  const Outcome unknown = run_ringattn({"help", "nonsense"});
  CHECK(unknown.exit_code == 2);
  CHECK(has(unknown.err, "unknown command 'nonsense'"));
  const Outcome unknown_bench = run_ringattn({"bench", "nonsense"});
  CHECK(unknown_bench.exit_code == 2);
  CHECK(has(unknown_bench.err, "unknown bench command 'nonsense'"));
}

TEST_CASE("cli: bench overlap --help hides the options its members are started with") {
  const Outcome o = run_ringattn({"bench", "overlap", "--help"});
  CHECK(o.exit_code == 0);
  CHECK(has(o.out, "--replot DIR"));
  for (const std::string internal : {"--worker", "--rank", "--peers", "--listen", "--ring-id", "internal:"})
    CHECK_MESSAGE(!has(o.out, internal), internal);
}

TEST_CASE("cli: every command takes --log-level and --quiet, and lists the exit codes in --help") {
  const auto commands = every_command();
  CHECK(commands.size() >= 10);
  for (auto args : commands) {
    args.insert(args.end(), {"--log-level", "warn", "--quiet", "--help"});
    const Outcome o = run_ringattn(args);
    INFO(args[0] << (args.size() > 4 ? " " + args[1] : "") << ": " << o.err);
    CHECK(o.exit_code == 0);
    CHECK(has(o.out, "--log-level LEVEL"));
    CHECK(has(o.out, "exit codes: 0 success; 1 failure"));
    CHECK(has(o.out, "2 usage error"));
    CHECK(has(o.out, "3 unexpected internal error"));
  }
  const Outcome bad = run_ringattn({"plan", "--log-level", "loud"});
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "--log-level expects trace, debug, info, warn, error or off, got 'loud'"));
}

TEST_CASE("cli: counts take exponents and exact decimals everywhere; others are refused with a reason") {
  const Outcome o = run_ringattn(small_verify({"--seq", "1e3"}));  // the later --seq wins
  INFO(o.out << o.err);
  CHECK(o.exit_code == 0);
  CHECK(has(o.out, "1000 tokens"));

  const Outcome frac = run_ringattn(small_verify({"--seq", "1.3"}));
  CHECK(frac.exit_code == 2);
  CHECK(has(frac.err, "--seq is not a whole number, got '1.3'"));

  const Outcome plan = run_ringattn({"plan", "--seq", "1.5M", "--nodes", "64", "--json"});
  CHECK(plan.exit_code == 0);
  CHECK(has(plan.out, "1572864"));
  const Outcome neg = run_ringattn({"plan", "--seq", "-1e3"});
  CHECK(neg.exit_code == 2);
  CHECK(has(neg.err, "--seq must not be negative"));
}

TEST_CASE("cli: one dtype vocabulary: fp32 and bf16, the same spellings in every command") {
  for (const char* spelling : {"fp32", "f32", "float32", "bf16", "bfloat16"}) {
    const Outcome o = run_ringattn({"plan", "--dtype", spelling});
    INFO(spelling << ": " << o.err);
    CHECK(o.exit_code == 0);
    CHECK(has(o.out, std::string(spelling).find('b') == 0 ? "bf16 (2 bytes)" : "fp32 (4 bytes)"));
  }
  // No command of ours runs fp16; plan used to accept it and print it as "bf16".
  const Outcome fp16 = run_ringattn({"plan", "--dtype", "fp16", "--flops", "1e12"});
  CHECK(fp16.exit_code == 2);
  CHECK(has(fp16.err, "--dtype expects fp32 or bf16, got 'fp16'"));
  // bench kernel takes a list of the same spellings and prints the canonical names.
  const Outcome kernel = run_ringattn({"bench", "kernel", "--b", "64", "--heads", "1", "--kv-heads", "1", "--head-dim",
                                       "32", "--dtype", "f32,bfloat16", "--mask", "none", "--threads", "1", "--no-naive"});
  INFO(kernel.err);
  CHECK(kernel.exit_code == 0);
  const auto rows = lines_of(kernel.out);
  REQUIRE(rows.size() == 2);
  CHECK(field(parse_json(rows[0]), "dtype").get<std::string>() == "fp32");
  CHECK(field(parse_json(rows[1]), "dtype").get<std::string>() == "bf16");
  const Outcome v = run_ringattn(small_verify({"--dtype", "float32", "--quiet"}));
  CHECK(v.exit_code == 0);
  CHECK(has(v.out, ", fp32\n"));
}

TEST_CASE("cli: --threads 0 means all cores for verify and the nodes it starts") {
  const Outcome o = run_ringattn(small_verify({"--threads", "0", "--quiet"}));
  INFO(o.out << o.err);
  CHECK(o.exit_code == 0);
  CHECK(has(o.out, "-> exact"));
  const Outcome neg = run_ringattn(small_verify({"--threads", "-1"}));
  CHECK(neg.exit_code == 2);
}

TEST_CASE("cli: --quiet prints only the result; --log-level and SPDLOG_LEVEL reach the nodes") {
  const Outcome quiet = run_ringattn(small_verify({"--quiet"}));
  INFO("stdout: " << quiet.out << "stderr: " << quiet.err);
  CHECK(quiet.exit_code == 0);
  CHECK(quiet.err.empty());
  const auto lines = lines_of(quiet.out);
  REQUIRE(lines.size() == 4);  // the ring, its times, per-node compute, the check
  CHECK(lines[0].rfind("ring: 2 nodes", 0) == 0);
  CHECK(has(lines[3], "-> exact"));

  // Without --quiet the nodes' lines are forwarded: none below warn may appear.
  const Outcome warn = run_ringattn(small_verify({"--log-level", "warn"}));
  INFO("stderr: " << warn.err);
  CHECK(warn.exit_code == 0);
  CHECK_FALSE(has(warn.err, "info:"));
  CHECK(lines_of(warn.out).size() == 4);

  const Outcome loud = run_ringattn(small_verify({"--log-level", "debug"}));
  CHECK(loud.exit_code == 0);
  CHECK(has(loud.err, "[rank 1] [node] info: done"));  // a node's own line, at the level passed on

  const Outcome env = run_ringattn(small_verify(), {{"SPDLOG_LEVEL", "off"}});
  CHECK(env.exit_code == 0);
  CHECK(env.err.empty());
  const Outcome flag_wins = run_ringattn(small_verify({"--log-level", "info"}), {{"SPDLOG_LEVEL", "off"}});
  CHECK(has(flag_wins.err, "info:"));
}

TEST_CASE("cli: verify says exact only for fp32; bf16 is within its tolerance") {
  const Outcome fp32 = run_ringattn(small_verify({"--quiet"}));
  CHECK(fp32.exit_code == 0);
  CHECK(has(fp32.out, "-> exact"));
  const Outcome bf16 = run_ringattn(small_verify({"--dtype", "bf16", "--quiet"}));
  INFO(bf16.out << bf16.err);
  CHECK(bf16.exit_code == 0);
  CHECK(has(bf16.out, "-> within bf16 tolerance"));
  CHECK_FALSE(has(bf16.out, "exact"));
}

TEST_CASE("cli: verify --json prints one JSON object and nothing else on stdout") {
  const Outcome o = run_ringattn(small_verify({"--json", "--dtype", "bf16"}));
  INFO("stdout: " << o.out << "stderr: " << o.err);
  CHECK(o.exit_code == 0);
  REQUIRE(lines_of(o.out).size() == 1);
  const Json j = parse_json(o.out);
  REQUIRE(j.is_object());
  for (const char* key : {"ok", "command", "nodes", "layout", "mask", "dtype", "tokens", "heads", "kv_heads", "head_dim",
                          "ring_seconds", "wall_seconds", "useful_flops", "gflops", "per_node", "max_abs_error_o",
                          "max_abs_error_lse", "tolerance_o", "verdict"})
    CHECK_MESSAGE(infer::json_field(j, key), std::string(key));
  CHECK(field(j, "ok").get<bool>());
  CHECK(field(j, "command").get<std::string>() == "verify");
  CHECK(field(j, "dtype").get<std::string>() == "bf16");
  CHECK(field(j, "tokens").get<double>() == 256);
  CHECK(field(j, "verdict").get<std::string>() == "within bf16 tolerance");
  CHECK(field(j, "max_abs_error_o").get<double>() <= field(j, "tolerance_o").get<double>());
  CHECK(field(j, "gflops").get<double>() > 0);
  const Json& nodes = field(j, "per_node");
  REQUIRE(nodes.size() == 2);
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(field(nodes[r], "rank").get<double>() == static_cast<double>(r));
    CHECK(field(nodes[r], "rows").get<double>() == 128);
    for (const char* key : {"total_seconds", "compute_seconds", "wait_seconds", "bytes_sent", "max_rss_kib"})
      CHECK_MESSAGE(infer::json_field(nodes[r], key), std::string(key));
  }
}

TEST_CASE("cli: run --json, on success and on failure, and the exit codes") {
  ScratchDir dir;
  const Shape shape{130, 2, 1, 32};
  Inputs(shape, 5, DType::f32).write(dir);
  Job job;
  job.extra = {"--json"};
  const Outcome ok = run_ringattn(run_args(dir, job));
  INFO("stdout: " << ok.out << "stderr: " << ok.err);
  CHECK(ok.exit_code == 0);
  REQUIRE(lines_of(ok.out).size() == 1);
  const Json j = parse_json(ok.out);
  CHECK(field(j, "ok").get<bool>());
  CHECK(field(j, "command").get<std::string>() == "run");
  CHECK(field(j, "out").get<std::string>() == dir.file("o.npy"));
  CHECK(field(j, "per_node").size() == 2);

  // A failed run still prints its one object; the error line goes to stderr; exit 1.
  std::filesystem::remove(dir.path() / "k.npy");
  const Outcome bad = run_ringattn(run_args(dir, job));
  INFO("stdout: " << bad.out << "stderr: " << bad.err);
  CHECK(bad.exit_code == 1);
  REQUIRE(lines_of(bad.out).size() == 1);
  const Json e = parse_json(bad.out);
  CHECK_FALSE(field(e, "ok").get<bool>());
  CHECK(has(field(e, "error").get<std::string>(), "k.npy"));
  CHECK(bad.error_lines().size() == 1);

  // A usage error: exit 2, and still one object with --json.
  const Outcome usage = run_ringattn({"run", "--json", "--no-such-option"});
  CHECK(usage.exit_code == 2);
  CHECK_FALSE(field(parse_json(usage.out), "ok").get<bool>());
}

TEST_CASE("cli: bench kernel records the command that made each line") {
  const Outcome o = run_ringattn({"bench", "kernel", "--b", "64", "--heads", "1", "--kv-heads", "1", "--head-dim", "32",
                                  "--dtype", "fp32", "--mask", "none", "--threads", "1", "--no-naive", "--quiet"});
  INFO("stdout: " << o.out << "stderr: " << o.err);
  CHECK(o.exit_code == 0);
  CHECK(o.err.empty());  // --quiet: no progress lines
  REQUIRE(lines_of(o.out).size() == 1);
  const Json j = parse_json(o.out);
  REQUIRE(infer::json_field(j, "command"));
  CHECK(field(j, "command").get<std::string>() ==
        "ringattn bench kernel --b 64 --heads 1 --kv-heads 1 --head-dim 32 --dtype fp32 --mask none --threads 1 "
        "--no-naive --quiet");
}

TEST_CASE("cli: bench linear times the weight matmul beside oneDNN's and a read of the weights, per case") {
  const Outcome o = run_ringattn({"bench", "linear", "--shapes", "t:40:70", "--rows", "1,13", "--dtype", "fp32,bf16",
                                  "--threads", "1", "--quiet"});
  INFO("stdout: " << o.out << "stderr: " << o.err);
  CHECK(o.exit_code == 0);
  CHECK(o.err.empty());
  REQUIRE(lines_of(o.out).size() == 4);  // 2 row counts x 2 dtypes
  for (const auto& line : lines_of(o.out)) {
    const Json j = parse_json(line);
    CHECK(field(j, "bench").get<std::string>() == "linear");
    CHECK(field(j, "out").get<std::int64_t>() == 40);
    CHECK(field(j, "in").get<std::int64_t>() == 70);
    // 2 panels of 32 outputs, 70 steps (fp32: 4 bytes) or 35 word pairs (bf16: 2 bytes a weight)
    CHECK(field(j, "weight_bytes").get<double>() == (field(j, "dtype").get<std::string>() == "bf16" ? 2 * 35 * 32 * 4 : 2 * 70 * 32 * 4));
    for (const char* k : {"seconds", "roof_seconds", "stream_seconds", "of_roof", "of_stream"})
      CHECK(field(j, k).get<double>() > 0);
  }
  const Outcome bad = run_ringattn({"bench", "linear", "--shapes", "t:40"});
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err, "is not NAME:OUT:IN"));
}

TEST_CASE("cli: bench overlap --replot says it re-analysed an existing sweep and how long that took") {
  ScratchDir dir;
  const std::filesystem::path sweep = std::filesystem::path(RINGATTN_SOURCE_ROOT) / "bench/results/overlap/unshaped";
  for (const char* f : {"overlap.csv", "overlap.jsonl"}) std::filesystem::copy_file(sweep / f, dir.path() / f);
  const Outcome o = run_ringattn({"bench", "overlap", "--replot", dir.path().string()});
  INFO("stderr: " << o.err);
  CHECK(o.exit_code == 0);
  CHECK(has(o.err, "re-analysed the existing sweep in " + dir.path().string() + " (not re-measured"));
  CHECK(has(o.err, "replot took "));
  for (const auto& line : lines_of(o.out)) CHECK_NOTHROW(parse_json(line));
}

TEST_CASE("cli: every duration option is checked the same way, and a bad one is a usage error (exit 2)") {
  const std::vector<std::vector<std::string>> commands = {
      {"status", "--to", "127.0.0.1:9"}, {"submit", "--to", "127.0.0.1:9", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy"},
      {"verify", "--seq", "64", "--heads", "1", "--kv-heads", "1", "--head-dim", "32", "--nodes", "1"}};
  for (const auto& base : commands)
    for (const char* bad : {"nan", "-1", "0", "inf", "1e400"}) {
      auto args = base;
      args.insert(args.end(), {"--timeout", bad});
      CAPTURE(base[0]);
      CAPTURE(bad);
      const Outcome o = run_ringattn(args);
      CHECK(o.exit_code == 2);
      CHECK(has(o.err, std::string("--timeout expects seconds between 0.001 and 86400, got '") + bad + "'"));
    }
  const Outcome wait = run_ringattn({"status", "--to", "127.0.0.1:9", "--wait", "-1"});
  CHECK(wait.exit_code == 2);
  CHECK(has(wait.err, "--wait expects seconds between 0 and 86400, got '-1'"));
}

TEST_CASE("cli: input files that are a FIFO, a device or too large are refused at once, never read") {
  ScratchDir dir;
  Inputs(Shape{64, 2, 1, 32}, 6, DType::f32).write(dir);
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // opened for reading, a FIFO would wait for a writer forever
  {
    std::ofstream big(dir.file("big.txt"));
    big << "0,";
    for (int i = 0; i < (17 << 20) / 8; ++i) big << "        ";  // 17 MiB of spaces: over the 16 MiB bound
    big << "64\n";
  }
  struct Case {
    std::string option, path, want;
  };
  for (const Case& c : {Case{"--cu-seqlens", "/dev/zero", "/dev/zero: not a regular file (a device)"},
                        Case{"--cu-seqlens", fifo, "fifo: not a regular file (a FIFO)"},
                        Case{"--cu-seqlens", dir.file("big.txt"), "more than the 16 MiB"},
                        Case{"--q", "/dev/zero", "/dev/zero: not a regular file (a device)"},
                        Case{"--q", fifo, "fifo: not a regular file (a FIFO)"}}) {
    CAPTURE(c.option);
    CAPTURE(c.path);
    Job job;
    auto args = run_args(dir, job);
    if (c.option == "--q") {
      for (std::size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == "--q") args[i + 1] = c.path;
    } else {
      args.insert(args.end(), {c.option, c.path});
    }
    const Outcome o = run_ringattn(args, {}, 60);  // a hang would be this deadline
    INFO(o.err);
    CHECK(o.exit_code == 1);
    CHECK(has(o.err, c.want));
  }
}

// The helpers themselves: a command that failed prints {"ok":false,...}; every check on a
// field it lacks must fail by itself, naming the field, and not take the suite down (the
// old `j.get(key)->` dereferenced null and killed every later case). should_fail: this
// case passes only if its checks did fail; the case after it shows the suite went on.
TEST_CASE("cli json helpers: a failure object fails its checks one by one" * doctest::should_fail()) {
  const Json e = parse_json(R"({"ok":false,"command":"verify","error":"rank 1: something broke"})");
  CHECK(field(e, "ok").get<bool>());                        // false: fails
  CHECK(field(e, "verdict").get<std::string>() == "exact");         // missing: fails, naming it and the error
  CHECK(field(e, "per_node").size() == 2);        // missing: fails, no crash
  CHECK(field(field(e, "per_node"), "rank").get<double>() == 0);  // inside a missing one: fails, no crash
  CHECK(field(parse_json("[1, 2]"), "ok").get<bool>());     // not an object at all
}

TEST_CASE("cli json helpers: the suite goes on after a failed object") {
  const Json ok = parse_json(R"({"ok":true,"per_node":[{"rank":0}]})");
  CHECK(field(ok, "ok").get<bool>());
  REQUIRE(field(ok, "per_node").size() == 1);
  CHECK(field(field(ok, "per_node")[0], "rank").get<double>() == 0);
}

}  // namespace ringattn::itest
