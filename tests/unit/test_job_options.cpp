// The job options' one table (infer/job/job_options_table.hpp) through its front ends: the batch
// job's parse_args, `ringattn generate`'s command line, and `ringattn serve`'s flags, TOML keys
// and RINGATTN_* variables. Each option every program shares parses to the same value, within
// the same bounds, refused with the same words (only the name of where it came from differs);
// each program's help lists every option it takes; an unknown option is refused by name.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "infer/job/job_options_table.hpp"
#include "infer/job/load.hpp"
#include "infer/job/options.hpp"
#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "src/generate/generate_options.hpp"
#include "src/serve/serve_config.hpp"
#include "tests/error_of.hpp"

namespace {

using infer::JobOption;
using infer::JobOptions;
using infer::Program;
using Argv = std::vector<std::string>;

// What an option stored, as text: the fields each shared option sets.
std::string field(const JobOption& opt, const JobOptions& o) {
  const std::string n = opt.name;
  std::ostringstream s;
  if (n == "model") s << o.hf << "|" << o.gguf << "|" << o.llama2c;
  else if (n == "tokenizer") s << o.tokenizer;
  else if (n == "prompts") s << o.prompts;
  else if (n == "prompt") s << o.prompt_text.value_or("<none>");
  else if (n == "tokens") s << o.tokens;
  else if (n == "temperature") s << o.temperature;
  else if (n == "top_p") s << o.top_p;
  else if (n == "sample_seed") s << o.sample_seed;
  else if (n == "threads") s << o.threads;
  else if (n == "tp") s << o.tp.size;
  else if (n == "dtype") s << ringattn::to_string(o.dtype);
  else if (n == "weights_dtype") s << (o.weights_dtype ? std::string(ringattn::to_string(*o.weights_dtype)) : "stored");
  else if (n == "activations") s << ringattn::to_string(o.activations);
  else if (n == "layout") s << (o.layout ? std::string(ringattn::to_string(*o.layout)) : "balanced");
  else if (n == "rope_positions") s << (o.rope == infer::RopePositions::global ? "global" : "local");
  else if (n == "vocab") s << o.model.vocab;
  else if (n == "dim") s << o.model.dim;
  else if (n == "layers") s << o.model.layers;
  else if (n == "heads") s << o.model.heads;
  else if (n == "kv_heads") s << o.model.kv_heads;
  else if (n == "head_dim") s << o.model.head_dim;
  else if (n == "ffn") s << o.model.ffn;
  else if (n == "seed") s << o.seed;
  else if (n == "out") s << o.out_dir;
  else if (n == "random_prompt") s << o.random_prompt;
  else if (n == "system") s << o.system.value_or("<none>");
  else if (n == "chat") s << o.chat;
  else if (n == "untied") s << !o.model.tied;
  else if (n == "llama2c") s << o.llama2c;
  else if (n == "hf") s << o.hf;
  else if (n == "gguf") s << o.gguf;
  else if (n == "weights") s << o.weights;
  else FAIL("no field for job option " << n);
  return s.str();
}

// A front end's answer: the stored field, or the error with its source's name as <src>.
struct Outcome {
  std::string value, error;
  bool operator==(const Outcome&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Outcome& o) { return os << "{value '" << o.value << "', error '" << o.error << "'}"; }

std::string unsourced(std::string error, const std::string& source) {
  if (auto at = error.find(source); at != std::string::npos) error.replace(at, source.size(), "<src>");
  return error;
}

// The baseline arguments of each front end: what it needs to accept a command line at all,
// one model shape for both that take one; the option under test replaces its own.
const std::vector<std::pair<std::string, std::string>> kShape = {
    {"vocab", "256"}, {"dim", "128"}, {"layers", "2"}, {"heads", "4"}, {"kv-heads", "2"}, {"head-dim", "32"}, {"ffn", "256"}};

Argv baseline(Program p, const JobOption& tested) {
  std::vector<std::pair<std::string, std::string>> pairs;
  if (p == Program::infer) pairs = {{"prompts", "p.jsonl"}, {"tokenizer", "t.json"}};
  if (p == Program::generate) pairs = {{"model", "seed:1"}, {"prompts", "p.jsonl"}, {"tokenizer", "t.json"}, {"nodes", "2"}};
  if (p != Program::serve) pairs.insert(pairs.end(), kShape.begin(), kShape.end());
  if (p == Program::serve)
    pairs = {{"world-size", "2"}, {"rank", "0"}, {"peers", "a:1,b:2"}, {"model", "m.bin"}, {"tokenizer", "t.json"}};
  const std::string own = tested.spelling(p).flag;
  Argv argv;
  for (const auto& [flag, value] : pairs) {
    if (flag == own || (own == "prompt" && flag == "prompts")) continue;
    argv.insert(argv.end(), {"--" + flag, value});
  }
  return argv;
}

Outcome through_infer(const JobOption& opt, const std::string& value) {
  Argv args = baseline(Program::infer, opt);
  const std::string flag = "--" + std::string(opt.spelling(Program::infer).flag);
  args.insert(args.end(), {flag, value});
  std::vector<char*> argv{const_cast<char*>("infer")};
  for (auto& a : args) argv.push_back(a.data());
  JobOptions o;
  const std::string e = ringattn::test::error_of([&] { infer::parse_args(static_cast<int>(argv.size()), argv.data(), o); });
  return e.empty() ? Outcome{field(opt, o), ""} : Outcome{"", unsourced(e, flag)};
}

Outcome through_generate(const JobOption& opt, const std::string& value) {
  Argv args = baseline(Program::generate, opt);
  const std::string flag = "--" + std::string(opt.spelling(Program::generate).flag);
  args.insert(args.end(), {flag, value});
  std::optional<ringattn::generate::Plan> p;
  const std::string e = ringattn::test::error_of([&] {
    ringattn::cli::Args a("generate", "test");
    ringattn::generate::declare_generate_options(a);
    if (!a.parse(args)) throw std::logic_error("--help");
    p = ringattn::generate::make_plan(a);
  });
  return e.empty() ? Outcome{field(opt, p->job), ""} : Outcome{"", unsourced(e, flag)};
}

// serve's configuration as the job options it holds.
JobOptions job_of(const ringattn::serve::ServeConfig& c) {
  JobOptions o;
  o.threads = c.ring.threads;
  o.tp.size = c.tp;
  o.dtype = c.wire_dtype;
  o.weights_dtype = c.weights_dtype;
  o.activations = c.activations;
  o.tokenizer = c.tokenizer;
  if (!c.model.empty()) infer::set_model_path(o, c.model, "model");
  return o;
}

enum class Channel { flag, toml, env };

std::string key_of(const JobOption& opt) {
  std::string key = opt.spelling(Program::serve).flag;
  for (char& c : key)
    if (c == '-') c = '_';
  return key;
}

Outcome through_serve(const JobOption& opt, const std::string& value, Channel channel) {
  Argv args = baseline(Program::serve, opt);
  const std::string flag = "--" + std::string(opt.spelling(Program::serve).flag);
  const std::string path = (std::filesystem::temp_directory_path() / ("ringattn-job-options-" + std::to_string(::getpid()) + ".toml")).string();
  std::string source = flag;
  if (channel == Channel::flag) args.insert(args.end(), {flag, value});
  if (channel == Channel::toml) {
    const bool number = opt.kind == infer::OptionKind::whole || opt.kind == infer::OptionKind::real;
    std::ofstream(path) << key_of(opt) << " = " << (number ? value : "\"" + value + "\"") << "\n";
    args.insert(args.end(), {"--config", path});
    source = path + ": " + key_of(opt);
  }
  if (channel == Channel::env) {
    ::setenv(opt.env, value.c_str(), 1);
    source = opt.env;
  }
  std::optional<ringattn::serve::ServeConfig> c;
  const std::string e = ringattn::test::error_of([&] {
    ringattn::cli::Args a("serve", "test");
    ringattn::serve::declare_serve_options(a);
    if (!a.parse(args)) throw std::logic_error("--help");
    c = ringattn::serve::load_serve_config(a);
  });
  if (channel == Channel::env) ::unsetenv(opt.env);
  if (channel == Channel::toml) std::filesystem::remove(path);
  return e.empty() ? Outcome{field(opt, job_of(*c)), ""} : Outcome{"", unsourced(e, source)};
}

// The words of "fp32, bf16, fp16 or q8_0".
std::vector<std::string> choices(const JobOption& opt) {
  std::string list = opt.choices;
  for (auto at = list.find(" or "); at != std::string::npos; at = list.find(" or ")) list.replace(at, 4, ", ");
  std::vector<std::string> words;
  std::istringstream in(list);
  for (std::string w; std::getline(in, w, ',');) words.push_back(w.substr(w.find_first_not_of(' ')));
  return words;
}

// Values to try: in bounds, at and past both ends, and not of the grammar at all.
std::vector<std::string> samples(const JobOption& opt) {
  switch (opt.kind) {
    case infer::OptionKind::whole: {
      std::vector<std::string> v = {std::to_string(opt.lo), std::to_string(opt.lo + 1), std::to_string(opt.hi) + "0",
                                    "4294967297", "18446744073709551617"};
      if (opt.lo > 0) v.push_back(std::to_string(opt.lo - 1));
      if (opt.hi < INT64_MAX) v.push_back(std::to_string(opt.hi + 1));
      return v;
    }
    case infer::OptionKind::real: return {"0", std::to_string(opt.real_hi), "-1", "1000", "nan", "x"};
    case infer::OptionKind::word: {
      std::vector<std::string> v = choices(opt);
      v.push_back("bogus");
      return v;
    }
    case infer::OptionKind::text: return {"a/b.bin", "w.safetensors"};
    case infer::OptionKind::flag: return {"1"};
  }
  return {};
}

// Text that serve's TOML can hold as the option's type (a whole number's "x" is a TOML type error instead).
bool toml_holds(const JobOption& opt, const std::string& value) {
  if (opt.kind != infer::OptionKind::whole) return true;
  return value.find_first_not_of("-0123456789") == std::string::npos && value.size() < 19;
}

bool shared(const JobOption& opt) {
  int n = 0;
  for (Program p : {Program::infer, Program::generate, Program::serve}) n += opt.taken_by(p);
  return n >= 2;
}

}  // namespace

TEST_SUITE("job options") {
  TEST_CASE("each shared option parses alike through every front end: the same value, bounds and error text") {
    int compared = 0;
    for (const JobOption& opt : infer::job_options()) {
      if (!shared(opt)) continue;
      for (const std::string& value : samples(opt)) {
        std::vector<std::pair<std::string, Outcome>> seen;
        if (opt.taken_by(Program::infer)) seen.emplace_back("infer --flag", through_infer(opt, value));
        if (opt.taken_by(Program::generate)) seen.emplace_back("generate --flag", through_generate(opt, value));
        if (opt.taken_by(Program::serve)) {
          seen.emplace_back("serve --flag", through_serve(opt, value, Channel::flag));
          seen.emplace_back("serve env", through_serve(opt, value, Channel::env));
          if (toml_holds(opt, value)) seen.emplace_back("serve TOML", through_serve(opt, value, Channel::toml));
        }
        REQUIRE(seen.size() >= 2);
        for (std::size_t i = 1; i < seen.size(); ++i) {
          INFO(opt.name << " = '" << value << "': " << seen[0].first << " " << seen[0].second << " vs " << seen[i].first << " "
                        << seen[i].second);
          CHECK(seen[i].second == seen[0].second);
          ++compared;
        }
        // A number outside the bounds is refused naming them, whichever front end read it.
        std::int64_t n = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        const bool outside = ec != std::errc() || end != value.data() + value.size() || n < opt.lo || n > opt.hi;
        if (opt.kind == infer::OptionKind::whole && outside)
          CHECK(seen[0].second.error.find("<src> takes a whole number in [" + std::to_string(opt.lo) + ", " + std::to_string(opt.hi) +
                                          "], got '" + value + "'") != std::string::npos);
      }
    }
    CHECK(compared > 100);
  }

  TEST_CASE("the three front ends' errors, as the existing callers see them") {
    const JobOption* threads = infer::find_job_option(Program::infer, "threads");
    REQUIRE(threads);
    CHECK(through_infer(*threads, "4294967297").error == "<src> takes a whole number in [0, 4096], got '4294967297'");
    const JobOption* wd = infer::find_job_option(Program::serve, "weights-dtype");
    REQUIRE(wd);
    CHECK(through_generate(*wd, "fp8").error == "<src> = 'fp8': expected fp32, bf16, fp16 or q8_0");
    CHECK(through_serve(*wd, "fp8", Channel::env).error == "<src> = 'fp8': expected fp32, bf16, fp16 or q8_0");
    const JobOption* dtype = infer::find_job_option(Program::serve, "wire-dtype");
    REQUIRE(dtype);
    CHECK(dtype == infer::find_job_option(Program::generate, "dtype"));  // one option, two spellings
    CHECK(through_serve(*dtype, "bf16", Channel::toml).value == "bf16");
  }

  TEST_CASE("every default a program shows is a value of its option; the batch job's are JobOptions' own") {
    for (const JobOption& opt : infer::job_options())
      for (Program p : {Program::infer, Program::generate, Program::serve}) {
        const infer::Spelling& s = opt.spelling(p);
        if (!s.flag || !s.def) continue;
        JobOptions o;
        INFO(opt.name << " in " << to_string(p) << ": default '" << s.def << "'");
        CHECK_NOTHROW(infer::store_job_option(opt, o, s.def, "default"));
        if (p == Program::infer) CHECK(field(opt, o) == field(opt, JobOptions{}));
      }
  }

  TEST_CASE("each program's help lists every job option it takes") {
    const std::string infer_help = infer::usage();
    ringattn::cli::Args g("generate", "test");
    ringattn::generate::declare_generate_options(g);
    ringattn::cli::Args s("serve", "test");
    ringattn::serve::declare_serve_options(s);
    const std::string generate_help = g.help(), serve_help = s.help();
    for (const JobOption& opt : infer::job_options()) {
      const std::pair<Program, const std::string*> helps[] = {
          {Program::infer, &infer_help}, {Program::generate, &generate_help}, {Program::serve, &serve_help}};
      for (const auto& [p, help] : helps) {
        const infer::Spelling& sp = opt.spelling(p);
        if (!sp.flag) continue;
        const std::string flag = "--" + std::string(sp.flag) + (opt.kind == infer::OptionKind::flag ? "" : " ");
        INFO(opt.name << " in " << to_string(p));
        CHECK((help->find(flag) != std::string::npos) == !sp.hidden);
        if (p == Program::serve) CHECK(help->find("[" + key_of(opt) + ", " + opt.env + "]") != std::string::npos);
      }
    }
    // The batch job's usage names every GGUF tensor type the reader takes.
    for (const char* type : {"Q8_0", "Q4_K", "Q6_K", "q8_0"}) CHECK_MESSAGE(infer_help.find(type) != std::string::npos, type);
    // And serve's keys include every job option serve takes, once.
    const auto& keys = ringattn::serve::serve_config_keys();
    for (const JobOption& opt : infer::job_options())
      if (opt.taken_by(Program::serve)) CHECK(std::count(keys.begin(), keys.end(), key_of(opt)) == 1);
  }

  TEST_CASE("an unknown option is refused, naming it") {
    const JobOption* tokens = infer::find_job_option(Program::infer, "tokens");
    REQUIRE(tokens);
    std::vector<char*> argv{const_cast<char*>("infer"), const_cast<char*>("--prompts"), const_cast<char*>("p"), const_cast<char*>("--max-tokens"),
                            const_cast<char*>("4")};
    JobOptions o;
    CHECK(ringattn::test::error_of([&] { infer::parse_args(static_cast<int>(argv.size()), argv.data(), o); }) ==
          "unknown flag --max-tokens (see --help)");
    ringattn::cli::Args g("generate", "test");
    ringattn::generate::declare_generate_options(g);
    CHECK(ringattn::test::error_of([&] { g.parse({"--tokens", "4"}); }) == "generate: unknown option --tokens (see --help)");
    ringattn::cli::Args s("serve", "test");
    ringattn::serve::declare_serve_options(s);
    CHECK(ringattn::test::error_of([&] { s.parse({"--dtype", "bf16"}); }) == "serve: unknown option --dtype (see --help)");
    const std::string path = (std::filesystem::temp_directory_path() / ("ringattn-job-options-bad-" + std::to_string(::getpid()) + ".toml")).string();
    std::ofstream(path) << "world_size = 1\nrank = 0\ntop_p = 0.5\n";
    ringattn::cli::Args t("serve", "test");
    ringattn::serve::declare_serve_options(t);
    REQUIRE(t.parse({"--config", path}));
    CHECK(ringattn::test::error_of([&] { ringattn::serve::load_serve_config(t); }).find(path + ": unknown key 'top_p'") != std::string::npos);
    std::filesystem::remove(path);
  }
}
