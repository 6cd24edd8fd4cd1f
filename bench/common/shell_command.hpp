// ringattn bench — the command line a benchmark records in its output, quoted so that
// pasting it into a POSIX shell gives the program exactly the same arguments again.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ringattn::bench {

// One word for sh/bash: bare if it holds only characters no shell treats specially
// (letters, digits, and _ @ % + = : , . / -), else in single quotes with each embedded
// ' written as '\''. The empty word is ''.
std::string shell_quote(std::string_view word);

// "ringattn <command> <args...>", every word quoted: e.g. shell_command("bench ring",
// {"--dtype", "fp32,bf16"}) is "ringattn bench ring --dtype fp32,bf16".
std::string shell_command(std::string_view command, const std::vector<std::string>& args);

}  // namespace ringattn::bench
