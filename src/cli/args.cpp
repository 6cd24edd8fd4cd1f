#include "args.hpp"


#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "ringattn/split.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/log.hpp"

namespace ringattn::cli {

Args::Args(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {
  // Common to every command; help() lists them apart from the command's own.
  opts_.push_back({"log-level", "LEVEL", "trace, debug, info, warn, error or off (default info, or SPDLOG_LEVEL)", "",
                   true, false, {}});
  opts_.push_back({"quiet", "", "print only results and errors", "", true, false, {}});
}

Args& Args::option(std::string name, std::string value, std::string help, std::string def) {
  opts_.push_back({std::move(name), std::move(value), std::move(help), std::move(def), false, false, {}});
  return *this;
}

Args& Args::internal(std::string name, std::string value, std::string help) {
  opts_.push_back({std::move(name), std::move(value), std::move(help), "", true, false, {}});
  return *this;
}

Args& Args::epilogue(std::string text) {
  epilogue_ = std::move(text);
  return *this;
}

bool Args::parse(const std::vector<std::string>& argv) {
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (a.rfind("--", 0) != 0)
      throw InvalidArgument(command_ + ": unexpected argument '" + a + "' (see --help)");
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    Opt* o = nullptr;
    for (auto& c : opts_)
      if (c.name == name) o = &c;
    if (!o) throw InvalidArgument(command_ + ": unknown option --" + name + " (see --help)");
    if (o->value.empty()) {
      if (inline_value) throw InvalidArgument(command_ + ": --" + name + " takes no value");
    } else if (!inline_value) {
      if (i + 1 >= argv.size())
        throw InvalidArgument(command_ + ": --" + name + " needs a value (" + o->value + ")");
      value = argv[++i];
    }
    o->given = true;
    o->got = value;
  }
  if (auto level = log_level()) set_log_level(*level);
  return true;
}

std::optional<std::string> Args::log_level() const {
  if (auto l = maybe("log-level")) return l;
  if (quiet()) return "error";
  return std::nullopt;
}

const Args::Opt& Args::find(std::string_view name) const {
  for (auto& o : opts_)
    if (o.name == name) return o;
  throw InvalidArgument(command_ + ": internal: undeclared option --" + std::string(name));
}

bool Args::has(std::string_view name) const { return find(name).given; }

std::optional<std::string> Args::maybe(std::string_view name) const {
  const Opt& o = find(name);
  if (o.given) return o.got;
  if (!o.def.empty()) return o.def;
  return std::nullopt;
}

std::string Args::str(std::string_view name) const {
  auto v = maybe(name);
  if (!v) throw InvalidArgument(command_ + ": --" + std::string(name) + " is required (see --help)");
  return *v;
}

std::int64_t Args::int64(std::string_view name) const {
  return parse_integer(str(name), "--" + std::string(name));
}

double Args::real(std::string_view name, double lo, double hi) const {
  return parse_real_in(str(name), "--" + std::string(name), lo, hi);
}

double Args::seconds(std::string_view name, double lo, double hi) const {
  const std::string s = str(name);
  auto refuse = [&] {
    std::ostringstream range;
    range << lo << " and " << hi;
    throw InvalidArgument(command_ + ": --" + std::string(name) + " expects seconds between " + range.str() +
                          ", got '" + s + "'");
  };
  double v = 0;
  try {
    std::size_t used = 0;
    v = std::stod(s, &used);
    if (used != s.size()) refuse();
  } catch (const std::logic_error&) {  // stod: not a number, or out of double's range
    refuse();
  }
  if (!std::isfinite(v) || v < lo || v > hi) refuse();
  return v;
}

namespace {

void help_line(std::ostringstream& os, const std::string& name, const std::string& value, const std::string& help,
               const std::string& def) {
  std::string left = "  --" + name + (value.empty() ? "" : " " + value);
  os << left << std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') << help;
  if (!def.empty()) os << " (default " << def << ")";
  os << "\n";
}

}  // namespace

std::string Args::help() const {
  std::ostringstream os;
  os << "usage: ringattn " << command_ << " [options]\n\n" << summary_ << "\n\noptions:\n";
  for (auto& o : opts_)
    if (!o.hidden) help_line(os, o.name, o.value, o.help, o.def);
  os << "\ncommon options:\n";
  for (const char* common : {"log-level", "quiet"}) {
    const Opt& o = find(common);
    help_line(os, o.name, o.value, o.help, o.def);
  }
  help_line(os, "help", "", "this text", "");
  if (!epilogue_.empty()) os << "\n" << epilogue_ << "\n";
  for (const auto& o : opts_)
    if (o.name == "dtype") {
      os << "\n" << cpu_paths_help();
      break;
    }
  os << "\n" << exit_codes_help();
  return os.str();
}

std::string cpu_paths_help() {
  return "this CPU: kernels on the '" + std::string(to_string(default_isa())) + "' path, oneDNN ISA " + matmul_isa() +
         "; fp32 calls: oneDNN " + matmul_implementation(DType::f32) + "; " + bf16_path() + "\n";
}

std::string_view exit_codes_help() {
  return "exit codes: 0 success; 1 failure (input file, peer, network or protocol; verify: a result\n"
         "outside the tolerance); 2 usage error (unknown option, bad value); 3 unexpected internal error\n";
}

void set_log_level(std::string_view level, std::string_view what) {
  ringattn::set_log_level(parse_log_level(level, what));  // every logger: the flag wins over SPDLOG_LEVEL
}

std::int64_t parse_count(std::string_view text, std::string_view what) {
  const std::int64_t v = parse_integer(text, what);
  if (v < 0) throw InvalidArgument(std::string(what) + " must not be negative, got '" + std::string(text) + "'");
  return v;
}

std::vector<std::int64_t> parse_int_list(std::string_view text, std::string_view what) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split_commas(text)) out.push_back(parse_count(item, what));
  return out;
}

}  // namespace ringattn::cli
