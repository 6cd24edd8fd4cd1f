// infer — reading one job option's value by its grammar (job_options_table.hpp): the same
// parse, bounds and error text whichever program, flag, key or variable it came from.
#include "job_options_table.hpp"

#include <ringattn/error.hpp>

#include <string>
#include <utility>

#include "../common/option_number.hpp"
#include "../model/architecture.hpp"

namespace infer {

std::string_view to_string(Program p) {
  switch (p) {
    case Program::infer: return "infer";
    case Program::generate: return "generate";
    case Program::serve: return "serve";
  }
  return "?";
}

namespace {

std::int64_t boolean(const std::string& text, const std::string& source) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") return 1;
  if (text == "0" || text == "false" || text == "no" || text == "off") return 0;
  throw ringattn::InvalidArgument(source + " = '" + text + "' is not a boolean (1/0, true/false)");
}

}  // namespace

void store_job_option(const JobOption& opt, JobOptions& o, const std::string& text, const std::string& source) {
  OptionValue v{.text = text, .source = source};
  switch (opt.kind) {
    case OptionKind::whole: v.whole = parse_integer_in(text, source, opt.lo, opt.hi); break;
    case OptionKind::real: v.real = parse_real_in(text, source, opt.real_lo, opt.real_hi); break;
    case OptionKind::flag: v.whole = boolean(text, source); break;
    case OptionKind::word:
      try {
        opt.store(o, v);
      } catch (const ringattn::InvalidArgument&) {  // the parser's own words name neither the source nor every choice
        throw ringattn::InvalidArgument(source + " = '" + text + "': expected " + opt.choices);
      }
      return;
    case OptionKind::text: break;
  }
  opt.store(o, v);
}

std::string job_option_help(const JobOption& opt, Program p, bool with_default) {
  const Spelling& s = opt.spelling(p);
  std::string help = opt.help;
  // The architectures a help names are the registry's (model/architecture.hpp).
  for (const auto& [key, names] : {std::pair<std::string_view, std::string>{"{hf-architectures}", hf_architecture_names()},
                                   {"{gguf-architectures}", gguf_architecture_names()}})
    for (std::size_t at = help.find(key); at != std::string::npos; at = help.find(key, at + names.size()))
      help.replace(at, key.size(), names);
  if (opt.kind == OptionKind::word) help += ": " + std::string(opt.choices);
  std::string more;
  if (with_default && s.def) more = "default " + std::string(s.def);
  if (s.note) more += (more.empty() ? "" : "; ") + std::string(s.note);
  if (!more.empty()) help += " (" + more + ")";
  return help;
}

}  // namespace infer
