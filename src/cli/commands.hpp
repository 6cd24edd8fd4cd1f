// ringattn — the subcommands of the one `ringattn` binary. Each takes the arguments
// after its name and returns the process exit code; errors are thrown as
// ringattn::Error and turned into a one-line message and exit code by main().
#pragma once

#include <string>
#include <vector>

#include "ringattn/error.hpp"

namespace ringattn::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;     // e.g. "run", "bench kernel"
  const char* summary;  // one line for `ringattn --help`
  CommandFn fn;
};

// A command stopped by SIGINT/SIGTERM/SIGHUP after cleaning up; main() prints the
// message and then dies by the same signal, as a shell expects.
class Interrupted : public Error {
 public:
  Interrupted(const std::string& what, int sig) : Error(what), signal(sig) {}
  int signal;
};

}  // namespace ringattn::cli
