// ringattn bench — what every benchmark records about the machine it ran on.
#pragma once

#include <unistd.h>

#include <fstream>
#include <string>

namespace ringattn::bench {

// The rest of the first line of `path` that starts with `key` (after "key: "), or the
// first line when key is empty; "" if none.
inline std::string first_line_of(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (key.empty() || line.rfind(key, 0) == 0) return key.empty() ? line : line.substr(line.find(':') + 2);
  return "";
}

// "AMD EPYC ..., 2 CPUs": the CPU model and the online CPUs.
inline std::string machine() {
  return first_line_of("/proc/cpuinfo", "model name") + ", " + std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)) +
         " CPUs";
}

}  // namespace ringattn::bench
