// ringattn — a small command-line parser shared by every subcommand.
//
// Options are declared with a name, a value placeholder (empty for flags) and a help
// line; `--help` prints them. Unknown options and missing values throw
// InvalidArgument naming the option, so every subcommand fails the same way.
//
// Every command also takes the common options --log-level LEVEL and --quiet, handled
// here: parse() sets the library's log level, so a command needs no code of its own for them.
// The level given on the command line wins over SPDLOG_LEVEL (read once by main).
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../../infer/common/option_number.hpp"

namespace ringattn::cli {

class Args {
 public:
  Args(std::string command, std::string summary);

  // Declare before parse(). `value` is the placeholder shown in help ("N", "FILE");
  // an empty placeholder makes the option a flag.
  Args& option(std::string name, std::string value, std::string help, std::string def = "");
  Args& flag(std::string name, std::string help) { return option(std::move(name), "", std::move(help)); }
  // Declared like option(), but not listed by --help: options one ringattn process
  // passes to another it started (bench overlap's members), not meant for users.
  Args& internal(std::string name, std::string value, std::string help);
  // A paragraph printed after the options, e.g. what the output means.
  Args& epilogue(std::string text);

  // Returns false if --help was given (help already printed to stdout). Applies
  // --log-level / --quiet to the log level (ringattn/log.hpp).
  bool parse(const std::vector<std::string>& argv);

  bool has(std::string_view name) const;             // flag given / option given
  std::string str(std::string_view name) const;      // value or default; throws if neither
  std::optional<std::string> maybe(std::string_view name) const;
  // Whole-number options, all through infer::parse_integer (option_number.hpp). int64: any
  // int64 (a value checked where it is used, never narrowed). integer<T>: a value in [lo, hi],
  // checked as int64 before it narrows to T; else "--NAME takes a whole number in [lo, hi],
  // got '...'" (InvalidArgument: exit 2). Every option stored in a narrower type reads it so.
  std::int64_t int64(std::string_view name) const;
  template <std::integral T>
  T integer(std::string_view name, T lo, T hi) const {
    return infer::parse_integer_as<T>(str(name), "--" + std::string(name), lo, hi);
  }
  // A decimal number in [lo, hi] (infer::parse_real_in): nan, inf and anything outside refused
  // naming the option and the range.
  double real(std::string_view name, double lo, double hi) const;
  // A duration in seconds within [lo, hi] (decimals allowed: 0.5); nan, inf, negative
  // and out-of-range values are refused naming the option and the range. Every
  // command's --timeout, --wait and other durations go through this one parser.
  double seconds(std::string_view name, double lo, double hi) const;
  std::string help() const;

  // --quiet: print only results and errors (no progress, no log lines below error).
  bool quiet() const { return has("quiet"); }
  // The log level this command line asked for (--log-level, else "error" for --quiet),
  // for the processes a command starts; nullopt if neither was given.
  std::optional<std::string> log_level() const;

 private:
  struct Opt {
    std::string name, value, help, def;
    bool hidden = false;
    bool given = false;
    std::string got;
  };
  const Opt& find(std::string_view name) const;
  std::string command_, summary_, epilogue_;
  std::vector<Opt> opts_;
};

// "this CPU: kernels on the 'avx2' path, ...; bf16 calls: ..." for --help: which paths a
// call takes here (RINGATTN_ISA and ONEDNN_MAX_CPU_ISA included).
std::string cpu_paths_help();
// The exit codes of every command, as printed at the end of every --help.
std::string_view exit_codes_help();

// Sets the level of every ringattn logger, existing and future, to `level` (trace,
// debug, info, warn, error or off), replacing per-logger levels from SPDLOG_LEVEL.
// Throws InvalidArgument naming `what` for an unknown level.
void set_log_level(std::string_view level, std::string_view what = "--log-level");

// The one grammar for whole numbers on the command line, used by every option that
// takes a count (Args::int64 and integer, the planner, lists, serve's config): infer's
// (option_number.hpp): "4096", "1e6", "2.5e3", "64k", "1.5M", "-5"; exact, within int64.
using infer::parse_integer;
using infer::parse_integer_as;
using infer::parse_integer_in;
using infer::parse_real_in;
std::int64_t parse_count(std::string_view text, std::string_view what);  // parse_integer, refusing negatives
// Comma-separated counts: "128,256,1k".
std::vector<std::int64_t> parse_int_list(std::string_view text, std::string_view what);

}  // namespace ringattn::cli
