#include "units.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "ringattn/error.hpp"

namespace ringattn::plan {
namespace {

struct Prefix {
  char letter;
  double scale;
};
constexpr std::array<Prefix, 5> kSi = {{{'k', 1e3}, {'M', 1e6}, {'G', 1e9}, {'T', 1e12}, {'P', 1e15}}};

// std::stod accepts leading spaces, "inf", "nan" and hex; the checks below refuse
// them by allowing only decimal characters, a digit or '.' first, and a finite result.
bool parse_plain(std::string_view text, double& out) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')) return false;
  if (text.find_first_not_of("0123456789.eE+-") != std::string_view::npos) return false;  // no hex, no spaces
  try {
    const std::string s(text);
    std::size_t used = 0;
    out = std::stod(s, &used);
    return used == s.size() && std::isfinite(out);
  } catch (const std::exception&) {
    return false;
  }
}

// Scales value to the largest prefix not above it; returns the prefix letter or 0.
char pick_prefix(double& value, const char* letters, double step) {
  char chosen = 0;
  double scale = 1;
  for (const char* l = letters; *l; ++l) {
    if (std::fabs(value) < scale * step) break;
    scale *= step;
    chosen = *l;
  }
  value /= scale;
  return chosen;
}

std::string three_digits(double v) {
  char buf[32];
  const double a = std::fabs(v);
  std::snprintf(buf, sizeof buf, a >= 99.95 ? "%.0f" : a >= 9.995 ? "%.1f" : "%.2f", v);
  return buf;
}

}  // namespace

double parse_rate(std::string_view text, std::string_view what) {
  double scale = 1;
  std::string_view digits = text;
  for (const Prefix& p : kSi) {
    if (!digits.empty() && digits.back() == p.letter) {
      scale = p.scale;
      digits.remove_suffix(1);
      break;
    }
  }
  double v = 0;
  if (!parse_plain(digits, v) || v <= 0)
    throw InvalidArgument(std::string(what) + " expects a positive number like 400e12 or 50G, got '" + std::string(text) + "'");
  return v * scale;
}

std::string format_bytes(double bytes) {
  double v = bytes;
  const char p = pick_prefix(v, "kMGTPE", 1000);
  if (!p) return std::to_string(static_cast<long long>(std::llround(bytes))) + " B";
  return three_digits(v) + " " + p + "B";
}

std::string format_seconds(double seconds) {
  const double a = std::fabs(seconds);
  if (a >= 1 || a == 0) return three_digits(seconds) + " s";
  if (a >= 1e-3) return three_digits(seconds * 1e3) + " ms";
  if (a >= 1e-6) return three_digits(seconds * 1e6) + " us";
  return three_digits(seconds * 1e9) + " ns";
}

std::string format_rate(double value, std::string_view unit) {
  double v = value;
  const char p = pick_prefix(v, "kMGTPE", 1000);
  return three_digits(v) + " " + (p ? std::string(1, p) : std::string()) + std::string(unit);
}

std::string format_sig(double value, int digits) {
  char buf[40];
  const double a = std::fabs(value);
  if (a != 0 && (a >= 1e5 || a < 1e-3))
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, value);
  else
    std::snprintf(buf, sizeof buf, "%#.*g", digits, value);  // '#' keeps "4.10", not "4.1"
  std::string out = buf;
  if (out.back() == '.') out.pop_back();  // ... but "100", not "100."
  return out;
}

std::string format_count(std::int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

}  // namespace ringattn::plan
