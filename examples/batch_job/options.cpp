// infer — the batch job's command line: the job options' table (job_options_table.hpp) spelled
// as `infer` spells it, then the checks that hold options together.
#include "../../infer/job/options.hpp"

#include "../../infer/job/job_options_table.hpp"

#include <ringattn/error.hpp>

#include <string_view>

namespace infer {

namespace {

constexpr const char* kSummary = R"(usage: infer --prompts FILE [options]
Greedy batch inference of a small Llama-style decoder over a ring of processes (rank,
world size and rendezvous from the environment: RINGATTN_RANK/WORLD_SIZE/MASTER/TOKEN,
or mpirun's with RINGATTN_MASTER). The shape flags (--vocab ... --untied) size a model
drawn from --seed or read from --weights; a checkpoint (--llama2c, --hf, --gguf) says its own.
)";

// "  --flag VALUE" padded to a column, then the help, wrapped at 100 columns.
void usage_line(std::string& out, const std::string& left, const std::string& help) {
  constexpr std::size_t kColumn = 26, kWidth = 100;
  std::string line = left.size() < kColumn ? left + std::string(kColumn - left.size(), ' ') : left + "\n" + std::string(kColumn, ' ');
  std::size_t used = line.size() - line.rfind('\n') - 1;
  std::string_view rest = help;
  while (!rest.empty()) {
    std::size_t cut = rest.size();
    if (used + cut > kWidth) {
      cut = rest.rfind(' ', kWidth - used);
      if (cut == std::string_view::npos || cut == 0) cut = rest.find(' ');
      if (cut == std::string_view::npos) cut = rest.size();
    }
    line += rest.substr(0, cut);
    rest.remove_prefix(cut);
    if (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (!rest.empty()) {
      line += "\n" + std::string(kColumn, ' ');
      used = kColumn;
    }
  }
  out += line + "\n";
}

}  // namespace

std::string usage() {
  std::string out = kSummary;
  for (const JobOption& opt : job_options()) {
    const Spelling& s = opt.spelling(Program::infer);
    if (!s.flag || s.hidden) continue;
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive) on
    // "literal" + std::string&& here, and the out-of-tree build is -Werror.
    std::string left = "  --";
    left += s.flag;
    if (opt.kind != OptionKind::flag) (left += ' ') += opt.value;
    usage_line(out, left, job_option_help(opt, Program::infer, true));
  }
  usage_line(out, "  --help", "this text");
  return out;
}

bool parse_args(int argc, char** argv, JobOptions& o) {
  for (const JobOption& opt : job_options()) {
    const Spelling& s = opt.spelling(Program::infer);
    if (s.flag && s.def) store_job_option(opt, o, s.def, "--" + std::string(s.flag) + "'s default");
  }
  std::string shape_flag;  // the first of --vocab ... --untied given, if any
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return false;
    const JobOption* opt = flag.starts_with("--") ? find_job_option(Program::infer, std::string_view(flag).substr(2)) : nullptr;
    if (!opt) throw ringattn::InvalidArgument("unknown flag " + flag + " (see --help)");
    if (opt->shape && shape_flag.empty()) shape_flag = flag;
    if (opt->kind == OptionKind::flag) {
      store_job_option(*opt, o, "1", flag);
      continue;
    }
    if (i + 1 >= argc) throw ringattn::InvalidArgument(flag + " needs a value (see --help)");
    store_job_option(*opt, o, argv[++i], flag);
  }
  if (o.prompts.empty() == !o.prompt_text.has_value())
    throw ringattn::InvalidArgument("give one of --prompts FILE and --prompt TEXT (see --help)");
  if (o.prompt_text && o.tokenizer.empty() && o.hf.empty() && o.gguf.empty())
    throw ringattn::InvalidArgument("--prompt TEXT needs --tokenizer FILE to turn it into token ids");
  if (!o.hf.empty() || !o.gguf.empty()) {
    const char* which = o.hf.empty() ? "--gguf" : "--hf";
    if (!o.weights.empty() + !o.llama2c.empty() + !o.hf.empty() + !o.gguf.empty() > 1)
      throw ringattn::InvalidArgument(std::string(which) + " with another model (--weights, --llama2c, --hf, --gguf): give one");
    if (!shape_flag.empty())
      throw ringattn::InvalidArgument(shape_flag + " with " + which + ": the checkpoint gives the model's shape");
    return true;  // checked when the checkpoint is read
  }
  if (!o.llama2c.empty()) {
    if (!o.weights.empty()) throw ringattn::InvalidArgument("--llama2c and --weights are two models: give one");
    if (!shape_flag.empty())
      throw ringattn::InvalidArgument(shape_flag + " with --llama2c: the checkpoint's header gives the model's shape");
    return true;  // checked when the header is read
  }
  o.model.check();
  return true;
}

}  // namespace infer
