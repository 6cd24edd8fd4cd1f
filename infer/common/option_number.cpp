// infer — the one grammar for numbers in options (option_number.hpp).
#include "option_number.hpp"

#include <ringattn/error.hpp>

#include <charconv>
#include <sstream>
#include <string>

namespace infer {

namespace {

[[noreturn]] void bad_number(std::string_view text, std::string_view what, const char* why) {
  throw ringattn::InvalidArgument(std::string(what) + " " + why + ", got '" + std::string(text) + "'");
}

constexpr const char* kNotANumber = "expects a whole number like 4096, 64k, 1.5M or 1e6";

// Appends decimal digits to v; false on overflow. Leading zeros are harmless.
bool accumulate(std::string_view digits, std::uint64_t& v) {
  for (char c : digits) {
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  return true;
}

bool all_digits(std::string_view s) { return s.find_first_not_of("0123456789") == std::string_view::npos; }

template <class T>
std::string range_text(T lo, T hi) {
  std::ostringstream os;
  os << "[" << lo << ", " << hi << "]";
  return os.str();
}

}  // namespace

std::int64_t parse_integer(std::string_view text, std::string_view what) {
  // Computed exactly in integers: value = mantissa x 10^exp10 x 2^bits, no doubles,
  // so "1.5M" is 1572864 and "9007199254740993" is not rounded.
  std::string_view s = text;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  int bits = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 'k': case 'K': bits = 10; break;
      case 'm': case 'M': bits = 20; break;
      case 'g': case 'G': bits = 30; break;
      default: break;
    }
    if (bits) s.remove_suffix(1);
  }
  std::int64_t exp10 = 0;
  if (auto e = s.find_first_of("eE"); e != std::string_view::npos) {
    std::string_view ex = s.substr(e + 1);
    s = s.substr(0, e);
    bool exp_negative = false;
    if (!ex.empty() && (ex[0] == '+' || ex[0] == '-')) {
      exp_negative = ex[0] == '-';
      ex.remove_prefix(1);
    }
    if (ex.empty() || !all_digits(ex)) bad_number(text, what, kNotANumber);
    std::uint64_t e_abs = 0;
    if (ex.size() > 4 || !accumulate(ex, e_abs)) bad_number(text, what, "is out of range");
    exp10 = exp_negative ? -static_cast<std::int64_t>(e_abs) : static_cast<std::int64_t>(e_abs);
  }
  if (s.empty() || s[0] < '0' || s[0] > '9') bad_number(text, what, kNotANumber);
  std::string_view whole = s, frac;
  const auto dot = s.find('.');
  if (dot != std::string_view::npos) {
    whole = s.substr(0, dot);
    frac = s.substr(dot + 1);
  }
  if (!all_digits(whole) || !all_digits(frac) || (dot != std::string_view::npos && frac.empty()))
    bad_number(text, what, kNotANumber);
  while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);  // "1.50" is "1.5"
  std::uint64_t mant = 0;
  if (!accumulate(whole, mant) || !accumulate(frac, mant)) bad_number(text, what, "is out of range");
  exp10 -= static_cast<std::int64_t>(frac.size());
  if (mant == 0) return 0;
  while (exp10 < 0) {  // divide by 10 = 5 x 2, exactly or not at all
    if (mant % 5 != 0) bad_number(text, what, "is not a whole number");
    mant /= 5;
    if (bits > 0) --bits;
    else if (mant % 2 == 0) mant /= 2;
    else bad_number(text, what, "is not a whole number");
    ++exp10;
  }
  const std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + (negative ? 1 : 0);
  for (; exp10 > 0; --exp10) {
    if (mant > limit / 10) bad_number(text, what, "is out of range");
    mant *= 10;
  }
  for (; bits > 0; --bits) {
    if (mant > limit / 2) bad_number(text, what, "is out of range");
    mant *= 2;
  }
  if (mant > limit) bad_number(text, what, "is out of range");
  if (!negative) return static_cast<std::int64_t>(mant);
  return mant == limit ? std::numeric_limits<std::int64_t>::min() : -static_cast<std::int64_t>(mant);
}

std::int64_t parse_integer_in(std::string_view text, std::string_view what, std::int64_t lo, std::int64_t hi) {
  auto refuse = [&] {
    throw ringattn::InvalidArgument(std::string(what) + " takes a whole number in " + range_text(lo, hi) + ", got '" +
                                    std::string(text) + "'");
  };
  std::int64_t x = 0;
  try {
    x = parse_integer(text, what);
  } catch (const ringattn::InvalidArgument&) {
    refuse();
  }
  if (x < lo || x > hi) refuse();
  return x;
}

double parse_real_in(std::string_view text, std::string_view what, double lo, double hi) {
  double x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !(x >= lo && x <= hi))
    throw ringattn::InvalidArgument(std::string(what) + " takes a number in " + range_text(lo, hi) + ", got '" +
                                    std::string(text) + "'");
  return x;
}

}  // namespace infer
