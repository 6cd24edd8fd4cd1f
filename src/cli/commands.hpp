// ringattn — the subcommands of the one `ringattn` binary. Each takes the arguments
// after its name and returns the process exit code; errors are thrown as
// ringattn::Error and turned into a one-line message and exit code by main().
#pragma once

#include <string>
#include <vector>

namespace ringattn::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;     // e.g. "run", "bench kernel"
  const char* summary;  // one line for `ringattn --help`
  CommandFn fn;
};

}  // namespace ringattn::cli
