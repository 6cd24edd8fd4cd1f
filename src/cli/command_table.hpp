// The table of subcommands. Each module declares its entry function here and adds one
// row; keep rows in the order `ringattn --help` should list them.
#pragma once

#include "src/cli/commands.hpp"

namespace ringattn::cli {

int version_main(const std::vector<std::string>& args);
int demo_main(const std::vector<std::string>& args);
int bench_kernel_main(const std::vector<std::string>& args);
int plan_main(const std::vector<std::string>& args);


inline constexpr Command kCommands[] = {
    {"demo", "single-process kernel check against dense float64 attention", demo_main},
    {"plan", "cost model: memory, compute vs transfer, b* for overlap", plan_main},
    {"bench kernel", "block-attention kernel vs oneDNN roofline and naive (JSON lines)", bench_kernel_main},
    {"version", "print the version", version_main},
};

}  // namespace ringattn::cli
