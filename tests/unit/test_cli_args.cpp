// The shared CLI parser: counts with suffixes, integer lists, and the errors every
// subcommand relies on (unknown option, missing value, bad number) naming the option.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "src/cli/args.hpp"

using ringattn::InvalidArgument;
using namespace ringattn::cli;

namespace {

Args make() {
  Args a("test", "a test command");
  a.option("seq", "N", "tokens", "1024").option("name", "S", "a name").option("rate", "R", "a rate").flag("causal", "mask");
  return a;
}

}  // namespace

TEST_SUITE("cli args") {
  TEST_CASE("parse_count: plain, k and M suffixes") {
    CHECK(parse_count("4096", "--x") == 4096);
    CHECK(parse_count("64k", "--x") == 65536);
    CHECK(parse_count("64K", "--x") == 65536);
    CHECK(parse_count("1M", "--x") == 1048576);
    CHECK(parse_count("-3", "--x") == -3);
    for (const char* bad : {"", "k", "12x", "1.5", "1e6", "9223372036854775807M", "99999999999999999999"})
      CHECK_THROWS_WITH_AS(parse_count(bad, "--seq"), doctest::Contains("--seq"), InvalidArgument);
  }

  TEST_CASE("parse_int_list") {
    CHECK(parse_int_list("128,256,1k", "--b") == std::vector<std::int64_t>{128, 256, 1024});
    CHECK(parse_int_list("7", "--b") == std::vector<std::int64_t>{7});
    CHECK_THROWS_WITH_AS(parse_int_list("1,,2", "--b"), doctest::Contains("--b"), InvalidArgument);
    CHECK_THROWS_WITH_AS(parse_int_list("1,2,", "--b"), doctest::Contains("--b"), InvalidArgument);
  }

  TEST_CASE("options, flags, defaults") {
    Args a = make();
    REQUIRE(a.parse({"--seq", "2k", "--causal", "--name=x", "--rate", "2.5"}));
    CHECK(a.int64("seq") == 2048);
    CHECK(a.has("causal"));
    CHECK(a.str("name") == "x");
    CHECK(a.real("rate") == 2.5);
    Args b = make();
    REQUIRE(b.parse({}));
    CHECK(b.int64("seq") == 1024);
    CHECK_FALSE(b.has("seq"));
    CHECK_FALSE(b.maybe("name"));
    CHECK_THROWS_WITH_AS(b.str("name"), doctest::Contains("--name is required"), InvalidArgument);
  }

  TEST_CASE("errors name the option") {
    CHECK_THROWS_WITH_AS(make().parse({"--nodes", "4"}), doctest::Contains("unknown option --nodes"), InvalidArgument);
    CHECK_THROWS_WITH_AS(make().parse({"--seq"}), doctest::Contains("--seq needs a value"), InvalidArgument);
    CHECK_THROWS_WITH_AS(make().parse({"--causal=yes"}), doctest::Contains("--causal takes no value"), InvalidArgument);
    CHECK_THROWS_WITH_AS(make().parse({"stray"}), doctest::Contains("unexpected argument 'stray'"), InvalidArgument);
    Args a = make();
    REQUIRE(a.parse({"--seq", "lots", "--rate", "fast"}));
    CHECK_THROWS_WITH_AS(a.int64("seq"), doctest::Contains("--seq expects an integer"), InvalidArgument);
    CHECK_THROWS_WITH_AS(a.real("rate"), doctest::Contains("--rate expects a number"), InvalidArgument);
  }

  TEST_CASE("help lists every option with its default") {
    const std::string h = make().help();
    CHECK(h.find("usage: ringattn test") != std::string::npos);
    CHECK(h.find("--seq N") != std::string::npos);
    CHECK(h.find("(default 1024)") != std::string::npos);
    CHECK(h.find("--causal") != std::string::npos);
  }
}
