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

namespace {

[[noreturn]] void bad_number(std::string_view text, std::string_view what, const char* why) {
  throw InvalidArgument(std::string(what) + " " + why + ", got '" + std::string(text) + "'");
}

constexpr const char* kNotANumber = "expects a whole number like 4096, 64k, 1.5M or 1e6";

// Appends decimal digits to v; false on overflow. Leading zeros are harmless.
bool accumulate(std::string_view digits, std::uint64_t& v) {
  for (char c : digits) {
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  return true;
}

bool all_digits(std::string_view s) { return s.find_first_not_of("0123456789") == std::string_view::npos; }

}  // namespace

std::int64_t parse_integer(std::string_view text, std::string_view what) {
  // Computed exactly in integers: value = mantissa x 10^exp10 x 2^bits, no doubles,
  // so "1.5M" is 1572864 and "9007199254740993" is not rounded.
  std::string_view s = text;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  int bits = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 'k': case 'K': bits = 10; break;
      case 'm': case 'M': bits = 20; break;
      case 'g': case 'G': bits = 30; break;
      default: break;
    }
    if (bits) s.remove_suffix(1);
  }
  std::int64_t exp10 = 0;
  if (auto e = s.find_first_of("eE"); e != std::string_view::npos) {
    std::string_view ex = s.substr(e + 1);
    s = s.substr(0, e);
    bool exp_negative = false;
    if (!ex.empty() && (ex[0] == '+' || ex[0] == '-')) {
      exp_negative = ex[0] == '-';
      ex.remove_prefix(1);
    }
    if (ex.empty() || !all_digits(ex)) bad_number(text, what, kNotANumber);
    std::uint64_t e_abs = 0;
    if (ex.size() > 4 || !accumulate(ex, e_abs)) bad_number(text, what, "is out of range");
    exp10 = exp_negative ? -static_cast<std::int64_t>(e_abs) : static_cast<std::int64_t>(e_abs);
  }
  if (s.empty() || s[0] < '0' || s[0] > '9') bad_number(text, what, kNotANumber);
  std::string_view whole = s, frac;
  const auto dot = s.find('.');
  if (dot != std::string_view::npos) {
    whole = s.substr(0, dot);
    frac = s.substr(dot + 1);
  }
  if (!all_digits(whole) || !all_digits(frac) || (dot != std::string_view::npos && frac.empty()))
    bad_number(text, what, kNotANumber);
  while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);  // "1.50" is "1.5"
  std::uint64_t mant = 0;
  if (!accumulate(whole, mant) || !accumulate(frac, mant)) bad_number(text, what, "is out of range");
  exp10 -= static_cast<std::int64_t>(frac.size());
  if (mant == 0) return 0;
  while (exp10 < 0) {  // divide by 10 = 5 x 2, exactly or not at all
    if (mant % 5 != 0) bad_number(text, what, "is not a whole number");
    mant /= 5;
    if (bits > 0) --bits;
    else if (mant % 2 == 0) mant /= 2;
    else bad_number(text, what, "is not a whole number");
    ++exp10;
  }
  const std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + (negative ? 1 : 0);
  for (; exp10 > 0; --exp10) {
    if (mant > limit / 10) bad_number(text, what, "is out of range");
    mant *= 10;
  }
  for (; bits > 0; --bits) {
    if (mant > limit / 2) bad_number(text, what, "is out of range");
    mant *= 2;
  }
  if (mant > limit) bad_number(text, what, "is out of range");
  if (!negative) return static_cast<std::int64_t>(mant);
  return mant == limit ? std::numeric_limits<std::int64_t>::min() : -static_cast<std::int64_t>(mant);
}

std::int64_t parse_count(std::string_view text, std::string_view what) {
  const std::int64_t v = parse_integer(text, what);
  if (v < 0) bad_number(text, what, "must not be negative");
  return v;
}

std::vector<std::int64_t> parse_int_list(std::string_view text, std::string_view what) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split_commas(text)) out.push_back(parse_count(item, what));
  return out;
}

}  // namespace ringattn::cli
