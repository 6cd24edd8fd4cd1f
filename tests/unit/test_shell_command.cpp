// The command line a benchmark records: pasted into bash it must give the program the
// same arguments. Checked by pasting it: a script defines `ringattn` as a function that
// prints its arguments, then runs the recorded command.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench/common/shell_command.hpp"

using ringattn::bench::shell_command;
using ringattn::bench::shell_quote;

namespace {

// Runs `script` with bash; returns what it wrote to stdout.
std::string run_bash(const std::string& script) {
  char path[] = "/tmp/ringattn-shell-test-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << script;
  std::string out;
  if (std::FILE* p = ::popen((std::string("bash ") + path).c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
  }
  ::unlink(path);
  return out;
}

}  // namespace

TEST_SUITE("bench shell command") {
  TEST_CASE("words no shell treats specially stay bare; the rest is single-quoted") {
    CHECK(shell_quote("--out") == "--out");
    CHECK(shell_quote("bench/results/overlap/like") == "bench/results/overlap/like");
    CHECK(shell_quote("1e12:3.1e9") == "1e12:3.1e9");
    CHECK(shell_quote("fp32,bf16") == "fp32,bf16");
    CHECK(shell_quote("") == "''");
    CHECK(shell_quote("ip netns exec ra{rank}") == "'ip netns exec ra{rank}'");
    CHECK(shell_quote("it's") == "'it'\\''s'");
    CHECK(shell_quote("$HOME") == "'$HOME'");
    CHECK(shell_command("bench overlap", {"--nice", "-20", "--launch", "ssh host{rank}"}) ==
          "ringattn bench overlap --nice -20 --launch 'ssh host{rank}'");
  }

  TEST_CASE("pasted into bash, the command gives back the same arguments") {
    const std::vector<std::string> args = {"--b", "64,128", "", "two words", "it's", "'", "''", "$HOME", "`id`",
                                           "$(id)", "a\\b", "*", "?", "~", "#not-a-comment", ";", "&&", "|", ">x",
                                           "{rank}", "\"dq\"", "new\nline", "tab\there", "!bang", "--x=a b"};
    const std::string command = shell_command("bench ring", args);
    const std::string got = run_bash("ringattn() { printf '%s\\0' \"$@\"; }\n" + command + "\n");
    std::vector<std::string> back;
    for (std::size_t start = 0, end; (end = got.find('\0', start)) != std::string::npos; start = end + 1)
      back.push_back(got.substr(start, end - start));
    INFO(command);
    REQUIRE(back.size() == args.size() + 2);
    CHECK(back[0] == "bench");
    CHECK(back[1] == "ring");
    for (std::size_t i = 0; i < args.size(); ++i) CHECK(back[i + 2] == args[i]);
  }
}
