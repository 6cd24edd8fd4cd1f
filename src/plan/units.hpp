// ringattn — numbers in and out of the planner: rates "400e12", "50G" on the command
// line (counts such as "1M" are cli::parse_count's); "17.2 GB", "11.0 ms", "1,048,576" in reports.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ringattn::plan {

// A rate or amount: a decimal number ("400e12", "2.5e9", "0.3") optionally followed
// by an SI multiplier k, M, G, T, P (powers of 1000: "50G" = 5e10). Must be finite and
// positive. Throws InvalidArgument naming `what` (the option).
double parse_rate(std::string_view text, std::string_view what);

// Token counts are cli::parse_count's, the same grammar as every other command's.

// Reports use decimal units (1 GB = 1e9 bytes), the seed's convention; 3 significant
// digits.
std::string format_bytes(double bytes);        // "17.2 GB", "268 MB", "512 B"
std::string format_seconds(double seconds);    // "11.0 ms", "298 us", "1.20 s"
std::string format_rate(double value, std::string_view unit);  // ("4e14","FLOP/s") -> "400 TFLOP/s"
std::string format_sig(double value, int digits = 3);          // "4.40e+12" style for big, "8.20" for small
std::string format_count(std::int64_t value);  // "1,048,576"

}  // namespace ringattn::plan
