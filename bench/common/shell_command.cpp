#include "shell_command.hpp"

namespace ringattn::bench {

std::string shell_quote(std::string_view word) {
  constexpr std::string_view kSafe =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-";
  if (!word.empty() && word.find_first_not_of(kSafe) == std::string_view::npos) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') out += "'\\''";  // close the quote, an escaped ', reopen
    else out += c;
  }
  out += '\'';
  return out;
}

std::string shell_command(std::string_view command, const std::vector<std::string>& args) {
  std::string out = "ringattn";
  out += ' ';
  out += command;  // our own words ("bench ring"), nothing to quote
  for (const auto& a : args) {
    out += ' ';
    out += shell_quote(a);  // appended, not "a" + b: GCC 12's -Wrestrict misfires on that
  }
  return out;
}

}  // namespace ringattn::bench
