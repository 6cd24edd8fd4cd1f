// ringattn generate — its command line (generate_options.hpp).
#include "generate_options.hpp"

#include <algorithm>
#include <thread>

#include <ringattn/error.hpp>
#include <ringattn/layout.hpp>

#include "../../infer/job/job_options_table.hpp"

namespace ringattn::generate {

namespace {

constexpr infer::Program kGenerate = infer::Program::generate;

}  // namespace

void declare_generate_options(cli::Args& a) {
  // The job options first (their defaults are the table's: job_option_help shows them).
  for (const infer::JobOption& opt : infer::job_options()) {
    const infer::Spelling& s = opt.spelling(kGenerate);
    if (!s.flag) continue;
    const std::string help = infer::job_option_help(opt, kGenerate, true);
    if (s.hidden) a.internal(s.flag, opt.value, help);
    else if (opt.kind == infer::OptionKind::flag) a.flag(s.flag, help);
    else a.option(s.flag, opt.value, help);
  }
  a.option("nodes", "P", "ranks started on this machine", "1")
      .option("max-rows", "N", "most rows a rank holds (the ring's limit; all ranks alike)", std::to_string(RingLimits{}.max_rows))
      .option("timeout", "S", "seconds a peer may stay silent", "120")
      .flag("json", "one JSON object on stdout at the end: texts, token ids, figures")
      .flag("verbose", "the ranks' progress on stderr: a line per prefill layer and decode step")
      .flag("from-env", "be one rank of a ring started elsewhere (RINGATTN_RANK/WORLD_SIZE/MASTER/TOKEN, or mpirun's)")
      .internal("decode-rank", "R", "every prompt decoded on rank R (as the daemons do on 0)")
      .internal("member", "R", "run as rank R")
      .internal("master", "HOST:PORT", "the launcher's rendezvous")
      .internal("ring-id", "N", "ring id");
}

Plan make_plan(const cli::Args& a) {
  Plan p;
  infer::JobOptions& j = p.job;
  p.nodes = a.integer("nodes", 1, 1024);
  const std::string model = a.str("model");
  const bool seeded = model.starts_with("seed:");  // weights drawn from a seed, in the shape the flags give
  if (seeded) j.seed = cli::parse_integer_as<std::uint64_t>(model.substr(5), "--model seed:S", 0, INT64_MAX);
  for (const infer::JobOption& opt : infer::job_options()) {
    const infer::Spelling& s = opt.spelling(kGenerate);
    if (!s.flag) continue;
    if (opt.shape && !seeded) continue;                               // a checkpoint says its own shape
    if (seeded && std::string_view(opt.name) == "model") continue;    // seed:S, read above
    const std::string flag = "--" + std::string(s.flag);
    if (a.has(s.flag)) infer::store_job_option(opt, j, opt.kind == infer::OptionKind::flag ? "1" : a.str(s.flag), flag);
    else if (s.def) infer::store_job_option(opt, j, s.def, flag + "'s default");
  }
  if (seeded) j.model.check();
  p.tp = j.tp.size;
  if (p.nodes % p.tp != 0)
    throw InvalidArgument("--tp " + std::to_string(p.tp) + " must divide --nodes " + std::to_string(p.nodes) +
                          " (the ring's groups of --tp ranks each hold one copy of the model, split)");
  const int given = a.has("prompt") + a.has("prompts") + a.has("random-prompt");
  if (given != 1) throw InvalidArgument("give one of --prompt TEXT, --prompts FILE and --random-prompt N");
  if ((j.chat || j.system) && !j.prompt_text) throw InvalidArgument("--chat and --system take the user's message from --prompt TEXT");
  if (j.system && !j.chat) throw InvalidArgument("--system is a chat's system message: give --chat too");
  if (j.prompt_text && j.tokenizer.empty() && j.hf.empty() && j.gguf.empty())
    throw InvalidArgument("--prompt TEXT needs --tokenizer FILE (the model's tokenizer)");
  p.layout = j.layout ? std::string(to_string(*j.layout)) : "balanced";
  if (!a.has("threads")) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    j.threads = std::max(1, cores / p.nodes);
  }
  j.progress = a.has("verbose");
  if (a.has("decode-rank")) j.decode_rank = a.integer("decode-rank", 0, p.nodes - 1);
  p.json = a.has("json");
  p.timeout = a.seconds("timeout", 0.001, 86400);
  p.max_rows = a.integer<std::int64_t>("max-rows", 1, INT64_MAX);
  return p;
}

}  // namespace ringattn::generate
