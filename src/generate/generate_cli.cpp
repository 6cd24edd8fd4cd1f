// ringattn generate — text from a model on a ring: `ringattn generate --model M
// --tokenizer T --prompt "Once upon a time" --nodes 4` starts 4 ranks on this machine with
// the launcher `ringattn run` uses (run/launcher.hpp) and prints the text as it comes. Each
// rank loads the model from its own path, the ranks agree on it, prefill the prompt
// through Ring::forward (RoPE at each token's place in its prompt) and decode on their
// stationary KV shards through Ring::decode (generate_rank.hpp). With --from-env the
// process is one rank of a ring a launcher such as mpirun or Slurm started
// (RingOptions::from_env): the rank that owns a prompt prints its text.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <ringattn/block_attention.hpp>
#include <ringattn/error.hpp>
#include <ringattn/launch.hpp>
#include <ringattn/log.hpp>
#include <ringattn/types.hpp>

#include "../cli/args.hpp"
#include "../cli/commands.hpp"
#include "../cli/json_object.hpp"
#include "../../infer/common/json.hpp"
#include "../../infer/job/load.hpp"
#include "generate_options.hpp"
#include "generate_output.hpp"
#include "generate_rank.hpp"
#include "../node/launcher_channel.hpp"
#include "../node/report.hpp"
#include "../run/launcher.hpp"
#include "../run/local_rendezvous.hpp"

namespace ringattn::cli {

namespace {

using generate::Plan;

// One prompt in text mode streams its pieces as they come (generate_output.hpp).
bool one_prompt(const Plan& p) { return p.job.prompt_text.has_value() || p.job.random_prompt > 0; }

JsonObject run_fields(const Plan& p, int nodes) {
  return JsonObject()
      .add("command", "generate")
      .add("nodes", nodes)
      .add("tp", p.tp)
      .add("layout", p.layout)
      .add("threads", p.job.threads)
      .add("dtype", std::string(to_string(p.job.dtype)))
      .add("weights_dtype", p.job.weights_dtype ? std::string(to_string(*p.job.weights_dtype)) : "stored")
      .add("isa", std::string(to_string(default_isa())))
      .add("max_tokens", p.job.tokens)
      .add("temperature", static_cast<double>(p.job.temperature));
}

RingOptions ring_options(const Plan& p, RingOptions o) {
  o.threads = p.job.threads;
  o.timeout = p.timeout;
  o.limits.max_rows = p.max_rows;
  if (p.tp > 1) o.group_size = p.tp;  // (a ring started elsewhere may say so: RINGATTN_GROUP_SIZE)
  if (p.job.llama2c.empty() && p.job.hf.empty() && p.job.gguf.empty()) {
    // seed:S: the shape is known here, so a long prompt's blocks are bounded by it (a
    // checkpoint's shape is read by the ranks: the ring's default limits hold it)
    o.limits.max_heads = p.job.model.heads;  // (a tensor-parallel rank's are fewer)
    o.limits.max_kv_heads = p.job.model.kv_heads;
    // the head dim the ring runs: padded to a multiple of 16, at least 32 (infer/job/job.cpp)
    o.limits.max_head_dim = std::max<std::int64_t>((p.job.model.head_dim + 15) / 16 * 16, 32);
  }
  return o;
}

// A rank started by the front below: its token from the launcher's pipe, its tokens and
// figures as lines on stdout (node/report.hpp's channel).
int member(const Plan& p, int rank, const std::string& master, std::uint64_t ring_id) {
  set_log_rank(rank);
  node::LauncherChannel launcher(rank);
  RingOptions o;
  o.rank = rank;
  o.world_size = p.nodes;
  o.connect_timeout = 60;
  o.ring_id = ring_id;
  o.master = master;
  o.master_is_external = true;
  o = ring_options(p, o);
  o.token = checked_token(launcher.token(o.connect_timeout), "the launcher's pipe");
  const generate::RankFigures f = generate::run_rank(p.job, o, [](const generate::TokenEvent& e) {
    JsonObject line;
    line.add("prompt", static_cast<std::int64_t>(e.prompt)).add_json("id", e.id).add("token", static_cast<std::int64_t>(e.token)).add("piece", e.piece).add("ends", e.ends);
    if (e.prompt_text) line.add("prompt_text", *e.prompt_text).add("prompt_tokens", e.prompt_tokens);
    node::emit_line("GEN " + line.str());
  }, true);
  node::emit_line("STATS " + f.json().add("rank", rank).str());
  return 0;
}

generate::TokenEvent parse_token_line(const std::string& json) {
  const infer::Json j = infer::parse_json(json);
  auto missing = [&](const char* key) {
    return Error(std::string("generate: a rank's GEN line has no valid \"") + key + "\": " + json);
  };
  auto number = [&](const char* key) {
    const std::optional<double> v = infer::json_number(j, key);
    if (!v) throw missing(key);
    return *v;
  };
  auto text = [&](const char* key) {
    const std::string* v = infer::json_string(j, key);
    if (!v) throw missing(key);
    return *v;
  };
  generate::TokenEvent e;
  e.prompt = static_cast<std::int32_t>(number("prompt"));
  const infer::Json* id = infer::json_field(j, "id");
  if (!id) throw missing("id");
  e.id = id->dump();
  e.token = static_cast<std::int32_t>(number("token"));
  e.piece = text("piece");
  const infer::Json* ends = infer::json_field(j, "ends");
  if (!ends || !ends->is_boolean()) throw missing("ends");
  e.ends = ends->get<bool>();
  if (infer::json_field(j, "prompt_text")) {
    e.prompt_text = text("prompt_text");
    e.prompt_tokens = static_cast<std::int64_t>(number("prompt_tokens"));
  }
  return e;
}

// Starts --nodes ranks of this program and prints what they generate.
int front(const Plan& p, const std::vector<std::string>& argv) {
  const std::string token = launcher_token();
  const std::uint64_t ring_id = new_ring_id();
  RingOptions ro = ring_options(p, RingOptions{});
  ro.world_size = p.nodes;
  const auto rendezvous = run::serve_local_rendezvous(ro, p.nodes, ring_id, token, 60);
  generate::GenerateOutput out(p.json, one_prompt(p), run_fields(p, p.nodes));
  run::LaunchSpec ls;
  ls.ranks = p.nodes;
  ls.token = token;
  ls.timeout_seconds = p.timeout;
  ls.quiet = !p.job.progress;
  ls.expected = {"", ""};
  ls.arguments = [&](int r) {
    std::vector<std::string> a = {"generate", "--member", std::to_string(r), "--master",
                                  "127.0.0.1:" + std::to_string(rendezvous->port()), "--ring-id", std::to_string(ring_id)};
    a.insert(a.end(), argv.begin(), argv.end());
    return a;
  };
  ls.on_line = [&](int, const std::string& line) {
    if (line.rfind("GEN ", 0) == 0) out.on_token(parse_token_line(line.substr(4)));
  };
  const std::vector<std::string> stats = run::launch(ls);
  std::vector<generate::RankFigures> figures;
  for (std::size_t r = 0; r < stats.size(); ++r) {
    try {
      figures.push_back(generate::RankFigures::parse(stats[r]));
    } catch (const std::exception& e) {
      throw Error("generate: rank " + std::to_string(r) + " ended without valid figures (" + e.what() + ")");
    }
  }
  out.finish(figures);
  return 0;
}

// One rank of a ring started elsewhere (mpirun, Slurm, by hand): it prints the prompts it owns.
int from_env(const Plan& p) {
  const RingOptions o = ring_options(p, RingOptions::from_env());
  set_log_rank(o.rank);
  generate::GenerateOutput out(p.json, one_prompt(p), run_fields(p, o.world_size));
  const generate::RankFigures f = generate::run_rank(p.job, o, [&](const generate::TokenEvent& e) { out.on_token(e); });
  if (out.has_text()) out.finish({f});  // the ranks that own no prompt print nothing
  return 0;
}

}  // namespace

int generate_main(const std::vector<std::string>& argv) {
  Args a("generate",
         "Text from a model on a ring of P processes: each loads the model from its own path, the prompt is\n"
         "sharded over the ring and prefilled through Ring::forward, then decoded on the stationary KV shards\n"
         "through Ring::decode. The text is printed as it comes; the figures follow on stderr (--json: one\n"
         "object on stdout). Greedy text is the same at every P and layout.");
  generate::declare_generate_options(a);
  a.epilogue("Example: ringattn generate --model stories260K.bin --tokenizer tok512.bin --prompt \"Once upon a time\" --nodes 4");
  if (!a.parse(argv)) return 0;
  if (!a.has("model")) throw InvalidArgument("generate needs --model FILE (see --help)");
  const Plan p = generate::make_plan(a);
  if (auto m = a.maybe("member")) {
    const int rank = parse_integer_as(*m, "--member", 0, p.nodes - 1);
    try {
      return member(p, rank, a.str("master"), a.integer<std::uint64_t>("ring-id", 0, INT64_MAX));
    } catch (const std::exception& e) {
      node::emit_line(node::fail_line(node::fail_report_for(e, rank)));
      throw;
    }
  }
  if (a.has("from-env")) return from_env(p);
  return front(p, argv);
}

}  // namespace ringattn::cli
