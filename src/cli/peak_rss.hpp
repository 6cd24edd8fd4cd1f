// ringattn — this process's peak resident set, for the figures a run reports.
#pragma once

#include <sys/resource.h>

#include <cstdio>

namespace ringattn::cli {

// Peak resident set of this process so far, in KiB. VmHWM belongs to this process's own
// address space. getrusage's ru_maxrss (and so /usr/bin/time) is not: Linux carries it
// over fork and exec, so a rank started by a process holding a lot of memory would report
// its parent's peak. ru_maxrss only where /proc is missing.
inline long peak_rss_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  if (f) std::fclose(f);
  if (kib < 0) {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    kib = ru.ru_maxrss;
  }
  return kib;
}

}  // namespace ringattn::cli
