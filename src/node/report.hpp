// ringattn — what a node tells the launcher that started it, one line each on stdout,
// and what the launcher tells the node on stdin. `ringattn run` reads these to learn
// ports, see progress and, when a job fails, name the rank where the failure began.
//
// node -> launcher (stdout):
//   IDENT {"job":"<16 hex>","token":"<16 hex>"}   fingerprints of its job shape and token
//   ALIVE <progress>                                 heartbeat: a counter that moves while it works
//   STATS {json}                                     success: timing and traffic
//   FAIL {"cause":"...","origin":R,"message":"..."}  failure: why, and which rank it blames
// launcher -> node (stdin, when started with --token-file - or --master):
//   TOKEN <secret>
// then the pipe stays open: EOF means the launcher is gone, and the node stops.
#pragma once

#include <optional>
#include <string>

#include "ringattn/error.hpp"

namespace ringattn::node {

struct Ident {
  std::string job, token;  // fingerprints
};

struct FailReport {
  FailureCause cause = FailureCause::unknown;
  int origin = -1;  // the rank the failure is attributed to; -1 unknown
  std::string message;
};

std::string ident_line(const Ident& id);
std::string fail_line(const FailReport& f);

// Parse the JSON part of a line (after "IDENT " / "FAIL "); nullopt if malformed.
std::optional<Ident> parse_ident(const std::string& json);
std::optional<FailReport> parse_fail(const std::string& json);

// Writes one line to stdout and flushes it; lines of different threads never interleave.
void emit_line(const std::string& line);

// The report for an exception that ends node `rank`: a NetworkError keeps its cause and
// origin; anything else (bad input, configuration, fault injected) is local to the rank.
FailReport fail_report_for(const std::exception& e, int rank);

}  // namespace ringattn::node
