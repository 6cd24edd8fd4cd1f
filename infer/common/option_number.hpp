// infer — the one grammar for numbers in options: every program's command line (ringattn's
// Args, the batch job's parse_args), the daemon's config file and its environment read
// their numbers here, so a value is parsed as a 64-bit number and checked against its
// option's range before anything narrows it (`--tp 4294967298` is refused, never run as 2).
// In infer/ (the lowest floor that parses options) so that the batch job, built on its own
// against an installed library, shares it with the programs of src/.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace infer {

// Whole numbers: digits, optionally a decimal fraction and an exponent ("4096", "1e6",
// "2.5e3"), then optionally a binary multiple k, M or G (x1024, x1024^2, x1024^3: "64k",
// "1.5M" = 1,572,864); a leading '-' for a negative one. The result must be a whole number
// ("1.3" is refused) that fits in int64; computed exactly, never through a double. Throws
// ringattn::InvalidArgument (a usage error: exit 2) naming `what`.
std::int64_t parse_integer(std::string_view text, std::string_view what);

// parse_integer's grammar, then [lo, hi]: anything else is refused as "<what> takes a whole
// number in [lo, hi], got '<text>'".
std::int64_t parse_integer_in(std::string_view text, std::string_view what, std::int64_t lo, std::int64_t hi);

// parse_integer_in, narrowed to T once the range (which must fit T and int64) is checked.
template <std::integral T>
T parse_integer_as(std::string_view text, std::string_view what, T lo, T hi) {
  if (!std::in_range<std::int64_t>(lo) || !std::in_range<std::int64_t>(hi) || lo > hi)
    throw std::logic_error("parse_integer_as: a range outside int64 for " + std::string(what));
  return static_cast<T>(parse_integer_in(text, what, static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi)));
}

// A decimal number ("0.5", "1e-3", "2") in [lo, hi]; nan, inf and anything outside are
// refused as "<what> takes a number in [lo, hi], got '<text>'".
double parse_real_in(std::string_view text, std::string_view what, double lo, double hi);

}  // namespace infer
