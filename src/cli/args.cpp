#include "src/cli/args.hpp"

#include <charconv>
#include <cstdio>
#include <sstream>

#include "ringattn/error.hpp"

namespace ringattn::cli {

Args::Args(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

Args& Args::option(std::string name, std::string value, std::string help, std::string def) {
  opts_.push_back({std::move(name), std::move(value), std::move(help), std::move(def), false, {}});
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
  return true;
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
  return parse_count(str(name), "--" + std::string(name));
}

double Args::real(std::string_view name) const {
  std::string s = str(name);
  try {
    std::size_t used = 0;
    double v = std::stod(s, &used);
    if (used != s.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw InvalidArgument(command_ + ": --" + std::string(name) + " expects a number, got '" + s + "'");
  }
}

std::string Args::help() const {
  std::ostringstream os;
  os << "usage: ringattn " << command_ << " [options]\n\n" << summary_ << "\n\noptions:\n";
  for (auto& o : opts_) {
    std::string left = "  --" + o.name + (o.value.empty() ? "" : " " + o.value);
    os << left;
    os << std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') << o.help;
    if (!o.def.empty()) os << " (default " << o.def << ")";
    os << "\n";
  }
  os << "  --help                    this text\n";
  return os.str();
}

std::int64_t parse_count(std::string_view text, std::string_view what) {
  std::int64_t mult = 1;
  std::string_view digits = text;
  if (!digits.empty()) {
    char c = digits.back();
    if (c == 'k' || c == 'K') mult = 1024;
    if (c == 'm' || c == 'M') mult = 1024 * 1024;
    if (mult != 1) digits.remove_suffix(1);
  }
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size())
    throw InvalidArgument(std::string(what) + " expects an integer, got '" + std::string(text) + "'");
  if (v > INT64_MAX / mult || v < INT64_MIN / mult)
    throw InvalidArgument(std::string(what) + " is out of range: '" + std::string(text) + "'");
  return v * mult;
}

std::vector<std::int64_t> parse_int_list(std::string_view text, std::string_view what) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    out.push_back(parse_count(text.substr(start, comma - start), what));
    start = comma + 1;
  }
  return out;
}

}  // namespace ringattn::cli
