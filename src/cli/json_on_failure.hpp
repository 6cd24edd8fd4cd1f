// ringattn — `--json` on failure: a command that fails still prints its one object,
// {"ok":false, "command":..., "error":...}, on stdout; the error goes on to main for the
// message on stderr and the exit code.
#pragma once

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "json_object.hpp"

namespace ringattn::cli {

template <class Body>
int json_on_failure(const std::vector<std::string>& argv, const char* command, Body&& body) {
  if (std::find(argv.begin(), argv.end(), "--json") == argv.end()) return body();
  try {
    return body();
  } catch (const std::exception& e) {
    std::printf("%s\n", JsonObject().add("ok", false).add("command", command).add("error", e.what()).str().c_str());
    std::fflush(stdout);
    throw;
  }
}

}  // namespace ringattn::cli
