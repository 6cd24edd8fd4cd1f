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
#include <thread>

#include <ringattn/block_attention.hpp>
#include <ringattn/error.hpp>
#include <ringattn/launch.hpp>
#include <ringattn/log.hpp>
#include <ringattn/types.hpp>

#include "../cli/args.hpp"
#include "../cli/commands.hpp"
#include "../cli/json_object.hpp"
#include "../../infer/json.hpp"
#include "../../infer/load.hpp"
#include "generate_output.hpp"
#include "generate_rank.hpp"
#include "../node/launcher_channel.hpp"
#include "../node/report.hpp"
#include "../run/launcher.hpp"
#include "../run/local_rendezvous.hpp"

namespace ringattn::cli {

namespace {

struct Plan {
  infer::JobOptions job;
  int nodes = 1;
  int tp = 1;  // tensor parallelism: ranks per group
  bool json = false;
  double timeout = 120;
  std::int64_t max_rows = RingLimits{}.max_rows;
  std::string layout = "balanced";
};

Plan make_plan(const Args& a) {
  Plan p;
  infer::JobOptions& j = p.job;
  p.nodes = a.integer("nodes", 1, 1024);
  p.tp = a.integer("tp", 1, 1024);
  if (p.nodes % p.tp != 0)
    throw InvalidArgument("--tp " + std::to_string(p.tp) + " must divide --nodes " + std::to_string(p.nodes) +
                          " (the ring's groups of --tp ranks each hold one copy of the model, split)");
  const std::string model = a.str("model");
  if (model.rfind("seed:", 0) == 0) {  // weights drawn from a seed, in the shape the flags give
    j.seed = parse_integer_as<std::uint64_t>(model.substr(5), "--model seed:S", 0, INT64_MAX);
    j.model.vocab = a.integer<std::int64_t>("vocab", 2, 1 << 24);
    j.model.dim = a.integer<std::int64_t>("dim", 2, 65536);
    j.model.layers = a.integer<std::int64_t>("layers", 1, 1024);
    j.model.heads = a.integer<std::int64_t>("heads", 1, 1024);
    j.model.kv_heads = a.integer<std::int64_t>("kv-heads", 1, 1024);
    j.model.head_dim = a.integer<std::int64_t>("head-dim", 2, 256);
    j.model.ffn = a.integer<std::int64_t>("ffn", 1, 1 << 20);
    j.model.check();
  } else {
    infer::set_model_path(j, model, "--model");
  }
  if (auto t = a.maybe("tokenizer")) j.tokenizer = *t;
  const int given = a.has("prompt") + a.has("prompts") + a.has("random-prompt");
  if (given != 1) throw InvalidArgument("give one of --prompt TEXT, --prompts FILE and --random-prompt N");
  if (auto t = a.maybe("prompt")) j.prompt_text = *t;
  j.chat = a.has("chat");
  if (auto s = a.maybe("system")) j.system = *s;
  if ((j.chat || j.system) && !j.prompt_text) throw InvalidArgument("--chat and --system take the user's message from --prompt TEXT");
  if (j.system && !j.chat) throw InvalidArgument("--system is a chat's system message: give --chat too");
  if (auto f = a.maybe("prompts")) j.prompts = *f;
  // At least one token (0 would leave no prompt at all); the model's context bounds it above.
  if (a.has("random-prompt")) j.random_prompt = a.integer<std::int64_t>("random-prompt", 1, INT32_MAX);
  if (j.prompt_text && j.tokenizer.empty() && j.hf.empty() && j.gguf.empty())
    throw InvalidArgument("--prompt TEXT needs --tokenizer FILE (the model's tokenizer)");
  j.tokens = a.integer("max-tokens", 1, 1 << 20);
  j.temperature = static_cast<float>(a.real("temperature", 0, 100));
  j.top_p = static_cast<float>(a.real("top-p", 0, 1));
  j.sample_seed = a.integer<std::uint64_t>("seed", 0, INT64_MAX);
  p.layout = a.str("layout");
  if (p.layout != "balanced") j.layout = parse_layout(p.layout);
  j.dtype = parse_dtype(a.str("dtype"));
  if (auto d = a.maybe("weights-dtype")) j.weights_dtype = parse_weights_dtype(*d);
  const std::string rope = a.maybe("rope-positions").value_or("global");
  if (rope != "global" && rope != "local") throw InvalidArgument("--rope-positions takes global or local");
  j.rope = rope == "global" ? infer::RopePositions::global : infer::RopePositions::local;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  j.threads = a.has("threads") ? a.integer("threads", 1, 1024) : std::max(1, cores / p.nodes);
  j.progress = a.has("verbose");
  if (a.has("decode-rank")) j.decode_rank = a.integer("decode-rank", 0, p.nodes - 1);
  p.json = a.has("json");
  p.timeout = a.seconds("timeout", 0.001, 86400);
  p.max_rows = a.integer<std::int64_t>("max-rows", 1, INT64_MAX);
  return p;
}

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
    // the head dim the ring runs: padded to a multiple of 16, at least 32 (infer/job.cpp)
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
  a.option("model", "FILE", "a llama2.c checkpoint (version 0, float32: stories260K.bin), a Hugging Face model directory "
           "(llama, mistral, qwen2, qwen3; safetensors F32/BF16/F16), a .gguf file (llama, qwen2, qwen3; F32/F16/BF16/Q8_0/Q4_K/Q6_K), "
           "or seed:S for weights drawn from S in the shape "
           "of the flags below")
      .option("tokenizer", "FILE", "the model's tokenizer: a tokenizer.json or llama2.c's tok512.bin (default: the model "
              "directory's tokenizer.json, the GGUF file's vocabulary): --prompt, and the text printed")
      .option("prompt", "TEXT", "one prompt (BOS, then its tokens)")
      .flag("chat", "--prompt is a user's message: the prompt is the model's chat template of it (tokenizer_config.json, "
            "chat_template.jinja, GGUF tokenizer.chat_template), the assistant's turn opened")
      .option("system", "TEXT", "with --chat: a system message before the user's")
      .option("prompts", "FILE", "JSON lines {\"id\": ..., \"text\": \"...\"} or {\"id\": ..., \"tokens\": [...]}, packed into one batch")
      .option("random-prompt", "N", "one prompt of N token ids drawn from the model's seed (benchmarks)")
      .option("max-tokens", "N", "tokens generated per prompt (a text ends earlier at the model's end token)", "256")
      .option("temperature", "T", "0: greedy; above 0: sampled from the logits / T", "0")
      .option("top-p", "P", "nucleus sampling's mass, in (0, 1); 0 or 1: every token", "0.9")
      .option("seed", "S", "the sampler's seed (prompt i starts from S + i): the same text at every P", "1")
      .option("nodes", "P", "ranks started on this machine", "1")
      .option("tp", "T", "tensor parallelism: groups of T consecutive ranks each hold one T-th of every layer (Megatron's "
              "split: heads, MLP units, vocabulary) and the ring runs across the groups; T divides --nodes", "1")
      .option("layout", "L", "balanced (whole prompts; long ones cut zigzag), contiguous, zigzag or striped", "balanced")
      .option("threads", "N", "kernel threads per rank (default: the cores / P, at least 1)")
      .option("dtype", "T", "K/V on the wire and in the KV cache: fp32 or bf16", "fp32")
      .option("weights-dtype", "T", "the model's matrices as held and multiplied: fp32, bf16 or fp16 (rounded at "
              "load; default: as the checkpoint stores them, fp32 for llama2.c and seed:S)")
      .option("max-rows", "N", "most rows a rank holds (the ring's limit; all ranks alike)", std::to_string(RingLimits{}.max_rows))
      .option("timeout", "S", "seconds a peer may stay silent", "120")
      .option("vocab", "N", "seed:S model: vocabulary", "512")
      .option("dim", "N", "seed:S model: width", "4096")
      .option("layers", "N", "seed:S model: layers", "2")
      .option("heads", "N", "seed:S model: query heads", "32")
      .option("kv-heads", "N", "seed:S model: key/value heads", "8")
      .option("head-dim", "N", "seed:S model: head dimension", "128")
      .option("ffn", "N", "seed:S model: MLP width", "1024")
      .flag("json", "one JSON object on stdout at the end: texts, token ids, figures")
      .flag("verbose", "the ranks' progress on stderr: a line per prefill layer and decode step")
      .flag("from-env", "be one rank of a ring started elsewhere (RINGATTN_RANK/WORLD_SIZE/MASTER/TOKEN, or mpirun's)")
      .internal("rope-positions", "global|local", "local: the positions trap, for the test that must catch it")
      .internal("decode-rank", "R", "every prompt decoded on rank R (as the daemons do on 0)")
      .internal("member", "R", "run as rank R")
      .internal("master", "HOST:PORT", "the launcher's rendezvous")
      .internal("ring-id", "N", "ring id")
      .epilogue("Example: ringattn generate --model stories260K.bin --tokenizer tok512.bin --prompt \"Once upon a time\" --nodes 4");
  if (!a.parse(argv)) return 0;
  if (!a.has("model")) throw InvalidArgument("generate needs --model FILE (see --help)");
  const Plan p = make_plan(a);
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
