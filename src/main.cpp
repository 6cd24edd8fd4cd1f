// ringattn — entry point: dispatches to a subcommand and maps errors to exit codes.
//   0 success, 1 a ringattn::Error (bad input, peer or protocol failure; verify: a
//   result outside the tolerance), 2 usage, 3 an unexpected exception.
// `ringattn help [command]` and `ringattn <group>` (e.g. `ringattn bench`) print usage.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "ringattn/log.hpp"
#include "ringattn_config.h"
#include "cli/args.hpp"
#include "cli/command_table.hpp"
#include "cli/commands.hpp"

namespace {

using ringattn::cli::Command;
using ringattn::cli::kCommands;

std::size_t words_of(const Command& c) { return std::strchr(c.name, ' ') ? 2 : 1; }

// True if some command's name starts with "group " (e.g. "bench").
bool is_group(const std::string& group) {
  for (const auto& c : kCommands)
    if (words_of(c) == 2 && std::string(c.name).rfind(group + " ", 0) == 0) return true;
  return false;
}

void print_usage(std::FILE* to) {
  std::fprintf(to, "ringattn %s — exact ring attention across CPU servers over TCP\n\n", RINGATTN_VERSION);
  std::fprintf(to, "usage: ringattn <command> [options]\n"
                   "       ringattn help <command>   (the same as ringattn <command> --help)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(to, "  %-16s %s\n", c.name, c.summary);
  std::fprintf(to, "  %-16s %s\n", "help", "this text, or a command's options");
  std::fprintf(to, "\nevery command takes --log-level LEVEL (or SPDLOG_LEVEL in the environment) and --quiet.\n"
                   "counts take 4096, 64k, 1.5M (binary multiples) or 1e6; dtypes are fp32 and bf16.\n");
  std::fputs(ringattn::cli::cpu_paths_help().c_str(), to);
  std::fputc('\n', to);
  std::fputs(std::string(ringattn::cli::exit_codes_help()).c_str(), to);
}

void print_group_usage(const std::string& group, std::FILE* to) {
  std::fprintf(to, "usage: ringattn %s <kind> [options]   (ringattn %s <kind> --help for details)\n\n%s commands:\n",
               group.c_str(), group.c_str(), group.c_str());
  for (const auto& c : kCommands) {
    const std::string_view name = c.name;
    if (words_of(c) == 2 && name.size() > group.size() && name.substr(0, group.size()) == group && name[group.size()] == ' ')
      std::fprintf(to, "  %-16s %s\n", c.name, c.summary);
  }
  std::fputc('\n', to);
  std::fputs(std::string(ringattn::cli::exit_codes_help()).c_str(), to);
}

// The command named by the first one or two words of args (the longest match wins).
const Command* find_command(const std::vector<std::string>& args, std::size_t& words) {
  const Command* cmd = nullptr;
  words = 0;
  for (const auto& c : kCommands) {
    const std::size_t n = words_of(c);
    if (n > args.size()) continue;
    const std::string got = n == 2 ? args[0] + " " + args[1] : args[0];
    if (got == c.name && n > words) {
      cmd = &c;
      words = n;
    }
  }
  return cmd;
}

int unknown_command(const std::vector<std::string>& args) {
  if (args.size() > 1 && is_group(args[0])) {
    std::fprintf(stderr, "ringattn: unknown %s command '%s'\n\n", args[0].c_str(), args[1].c_str());
    print_group_usage(args[0], stderr);
  } else {
    std::fprintf(stderr, "ringattn: unknown command '%s'\n\n", args[0].c_str());
    print_usage(stderr);
  }
  return 2;
}

}  // namespace

int ringattn::cli::version_main(const std::vector<std::string>& argv) {
  Args a("version", "Prints the version.");
  if (!a.parse(argv)) return 0;
  std::printf("ringattn %s\n", RINGATTN_VERSION);
  return 0;
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  ringattn::set_log_rank(-1);  // `node` switches to its rank once it knows it
  if (const char* env = std::getenv("SPDLOG_LEVEL")) {  // a command's --log-level overrides it
    try {
      ringattn::set_log_levels(env);
    } catch (const ringattn::Error& e) {
      std::fprintf(stderr, "ringattn: ignoring SPDLOG_LEVEL: %s\n", e.what());
    }
  }
  if (args.empty()) {
    print_usage(stderr);
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h" || (args[0] == "help" && args.size() == 1)) {
    print_usage(stdout);
    return 0;
  }
  if (args[0] == "--version") {
    std::printf("ringattn %s\n", RINGATTN_VERSION);
    return 0;
  }
  // `help X [Y]` is `X [Y] --help`.
  const bool help = args[0] == "help";
  if (help) args.erase(args.begin());
  if (help && args[0] == "help") {
    print_usage(stdout);
    return 0;
  }
  // A group alone, or with --help: its commands (`ringattn bench`, `ringattn bench --help`).
  if (is_group(args[0]) && (args.size() == 1 || args[1] == "--help" || args[1] == "-h")) {
    const bool asked = help || args.size() > 1;
    print_group_usage(args[0], asked ? stdout : stderr);
    return asked ? 0 : 2;
  }
  std::size_t words = 0;
  const Command* cmd = find_command(args, words);
  if (!cmd) return unknown_command(args);
  args.erase(args.begin(), args.begin() + static_cast<long>(words));
  if (help) args = {"--help"};
  try {
    return cmd->fn(args);
  } catch (const ringattn::cli::Interrupted& e) {
    std::fprintf(stderr, "ringattn %s: %s\n", cmd->name, e.what());
    std::fflush(stderr);
    std::signal(e.signal, SIG_DFL);  // end as the signal would have ended us
    std::raise(e.signal);
    return 128 + e.signal;
  } catch (const ringattn::InvalidArgument& e) {
    std::fprintf(stderr, "ringattn %s: error: %s\n", cmd->name, e.what());
    return 2;
  } catch (const ringattn::Error& e) {
    std::fprintf(stderr, "ringattn %s: error: %s\n", cmd->name, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringattn %s: unexpected error: %s\n", cmd->name, e.what());
    return 3;
  }
}
