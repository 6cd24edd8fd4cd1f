// ringattn generate — its command line: the job options' table (infer/job/job_options_table.hpp)
// as generate spells them, and generate's own (--nodes, --timeout, --json...).
#pragma once

#include <cstdint>
#include <string>

#include <ringattn/ring.hpp>

#include "../cli/args.hpp"
#include "../../infer/job/options.hpp"

namespace ringattn::generate {

struct Plan {
  infer::JobOptions job;
  int nodes = 1;
  int tp = 1;  // tensor parallelism: ranks per group (job.tp.size as given)
  bool json = false;
  double timeout = 120;
  std::int64_t max_rows = RingLimits{}.max_rows;
  std::string layout = "balanced";  // as the figures name it
};

// Declares every option of `ringattn generate` on a.
void declare_generate_options(cli::Args& a);

// The run a parsed command line asks for: each job option given, else its default, then
// the checks that hold them together. Throws InvalidArgument naming the flag.
Plan make_plan(const cli::Args& a);

}  // namespace ringattn::generate
