// ringattn — a small command-line parser shared by every subcommand.
//
// Options are declared with a name, a value placeholder (empty for flags) and a help
// line; `--help` prints them. Unknown options and missing values throw
// InvalidArgument naming the option, so every subcommand fails the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringattn::cli {

class Args {
 public:
  Args(std::string command, std::string summary);

  // Declare before parse(). `value` is the placeholder shown in help ("N", "FILE");
  // an empty placeholder makes the option a flag.
  Args& option(std::string name, std::string value, std::string help, std::string def = "");
  Args& flag(std::string name, std::string help) { return option(std::move(name), "", std::move(help)); }

  // Returns false if --help was given (help already printed to stdout).
  bool parse(const std::vector<std::string>& argv);

  bool has(std::string_view name) const;             // flag given / option given
  std::string str(std::string_view name) const;      // value or default; throws if neither
  std::optional<std::string> maybe(std::string_view name) const;
  std::int64_t int64(std::string_view name) const;   // checked parse, names the option on error
  double real(std::string_view name) const;
  std::string help() const;

 private:
  struct Opt {
    std::string name, value, help, def;
    bool given = false;
    std::string got;
  };
  const Opt& find(std::string_view name) const;
  std::string command_, summary_;
  std::vector<Opt> opts_;
};

// Parses a size like "4096", "64k" (x1024), "1M" (x1024^2).
std::int64_t parse_count(std::string_view text, std::string_view what);
// Comma-separated integers: "128,256,512".
std::vector<std::int64_t> parse_int_list(std::string_view text, std::string_view what);

}  // namespace ringattn::cli
