// ringattn — entry point: dispatches to a subcommand and maps errors to exit codes.
//   0 success, 1 a ringattn::Error (bad input, peer or protocol failure), 2 usage,
//   3 an unexpected exception.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "ringattn/log.hpp"
#include "ringattn_config.h"
#include "src/cli/commands.hpp"
#include "src/cli/command_table.hpp"

namespace {

void print_usage() {
  std::printf("ringattn %s — exact ring attention across CPU servers over TCP\n\n", RINGATTN_VERSION);
  std::printf("usage: ringattn <command> [options]   (ringattn <command> --help for details)\n\ncommands:\n");
  for (const auto& c : ringattn::cli::kCommands) std::printf("  %-16s %s\n", c.name, c.summary);
}

}  // namespace

int ringattn::cli::version_main(const std::vector<std::string>&) {
  std::printf("ringattn %s\n", RINGATTN_VERSION);
  return 0;
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  ringattn::set_log_rank(-1);  // `node` switches to its rank once it knows it
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    print_usage();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::printf("ringattn %s\n", RINGATTN_VERSION);
    return 0;
  }
  // Commands are one or two words ("run", "bench kernel"); the longest match wins.
  const ringattn::cli::Command* cmd = nullptr;
  std::size_t words = 0;
  for (const auto& c : ringattn::cli::kCommands) {
    std::string name = c.name;
    std::size_t n = name.find(' ') == std::string::npos ? 1 : 2;
    std::string got = args[0] + (n == 2 && args.size() > 1 ? " " + args[1] : "");
    if (n <= args.size() && got == name && n > words) {
      cmd = &c;
      words = n;
    }
  }
  if (!cmd) {
    std::fprintf(stderr, "ringattn: unknown command '%s'\n\n", args[0].c_str());
    print_usage();
    return 2;
  }
  args.erase(args.begin(), args.begin() + static_cast<long>(words));
  try {
    return cmd->fn(args);
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
