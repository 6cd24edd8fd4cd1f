// The shared CLI parser: the one count grammar, integer lists, the errors every
// subcommand relies on (unknown option, missing value, bad number) naming the option,
// internal options kept out of --help, and the common --log-level / --quiet.
#include <doctest/doctest.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "core/logger.hpp"
#include "src/cli/args.hpp"
#include "src/cli/json_object.hpp"
#include "infer/common/json.hpp"

using ringattn::InvalidArgument;
using namespace ringattn::cli;

namespace {

Args make() {
  Args a("test", "a test command");
  a.option("seq", "N", "tokens", "1024").option("name", "S", "a name").option("rate", "R", "a rate").flag("causal", "mask");
  return a;
}

// Puts spdlog back as main() leaves it, whatever a test did to the levels.
struct LogLevelReset {
  ~LogLevelReset() {
    ::unsetenv("SPDLOG_LEVEL");
    set_log_level("info");
  }
};

}  // namespace

TEST_SUITE("cli args") {
  TEST_CASE("parse_count: binary multiples, exponents, decimals that give a whole number") {
    CHECK(parse_count("4096", "--x") == 4096);
    CHECK(parse_count("0", "--x") == 0);
    CHECK(parse_count("007", "--x") == 7);
    CHECK(parse_count("64k", "--x") == 65536);
    CHECK(parse_count("64K", "--x") == 65536);
    CHECK(parse_count("1M", "--x") == 1048576);  // the seed's "1M" tokens
    CHECK(parse_count("1m", "--x") == 1048576);
    CHECK(parse_count("2G", "--x") == 2147483648);
    CHECK(parse_count("1.5M", "--x") == 1572864);
    CHECK(parse_count("0.5k", "--x") == 512);
    CHECK(parse_count("1e3", "--x") == 1000);
    CHECK(parse_count("1E3", "--x") == 1000);
    CHECK(parse_count("1e+6", "--x") == 1000000);
    CHECK(parse_count("2.5e3", "--x") == 2500);
    CHECK(parse_count("1.50e1", "--x") == 15);
    CHECK(parse_count("1000e-3", "--x") == 1);
    CHECK(parse_count("1e3k", "--x") == 1024000);
    CHECK(parse_count("9223372036854775807", "--x") == std::numeric_limits<std::int64_t>::max());
    CHECK(parse_count("8589934591G", "--x") == 8589934591LL * 1073741824LL);  // the largest in G
  }

  TEST_CASE("parse_count: refusals name the option and say why") {
    CHECK_THROWS_WITH_AS(parse_count("1.3", "--seq"), "--seq is not a whole number, got '1.3'", InvalidArgument);
    CHECK_THROWS_WITH_AS(parse_count("1.5e0", "--seq"), doctest::Contains("not a whole number"), InvalidArgument);
    CHECK_THROWS_WITH_AS(parse_count("1e-3", "--seq"), doctest::Contains("not a whole number"), InvalidArgument);
    CHECK_THROWS_WITH_AS(parse_count("0.3k", "--seq"), doctest::Contains("not a whole number"), InvalidArgument);
    CHECK_THROWS_WITH_AS(parse_count("-3", "--seq"), "--seq must not be negative, got '-3'", InvalidArgument);
    CHECK_THROWS_WITH_AS(parse_count("-1e3", "--seq"), doctest::Contains("must not be negative"), InvalidArgument);
    for (const char* big : {"9223372036854775808", "99999999999999999999", "9223372036854775807M", "8589934592G",
                            "1e19", "1e30", "1e99999"})
      CHECK_THROWS_WITH_AS(parse_count(big, "--seq"), doctest::Contains("--seq is out of range"), InvalidArgument);
    for (const char* bad : {"", "k", "12x", "1e", "e3", ".5", "1.", "+5", "--5", " 5", "5 ", "0x10", "inf", "nan",
                            "1,000", "1kk", "1.2.3", "1e3.5", "8E"})
      CHECK_THROWS_WITH_AS(parse_count(bad, "--seq"), doctest::Contains("--seq expects a whole number"), InvalidArgument);
  }

  TEST_CASE("parse_integer: the same grammar with a sign, for options such as --nice") {
    CHECK(parse_integer("-3", "--x") == -3);
    CHECK(parse_integer("-20", "--x") == -20);
    CHECK(parse_integer("-1.5k", "--x") == -1536);
    CHECK(parse_integer("-9223372036854775808", "--x") == std::numeric_limits<std::int64_t>::min());
    CHECK_THROWS_WITH_AS(parse_integer("-9223372036854775809", "--x"), doctest::Contains("out of range"), InvalidArgument);
  }

  TEST_CASE("Args::int64 and the planner share it: verify --seq 1e3, plan --seq 1M") {
    Args a = make();
    REQUIRE(a.parse({"--seq", "1e3"}));
    CHECK(a.int64("seq") == 1000);
    Args b = make();
    REQUIRE(b.parse({"--seq=1.5M"}));
    CHECK(b.int64("seq") == 1572864);
    Args c = make();
    REQUIRE(c.parse({"--seq", "1.3"}));
    CHECK_THROWS_WITH_AS(c.int64("seq"), "--seq is not a whole number, got '1.3'", InvalidArgument);
  }

  TEST_CASE("Args::integer: read as 64 bits, checked against the option's range, only then narrowed") {
    // The hostile tester's: 2^32 + 2 ran as --tp 2, 2^32 + 1 as --threads 1.
    for (const char* big : {"4294967298", "4294967297", "4G", "1e10", "9223372036854775807", "-4294967295"}) {
      Args a = make();
      REQUIRE(a.parse({"--seq", big}));
      CHECK_THROWS_WITH_AS(a.integer("seq", 1, 1024), ("--seq takes a whole number in [1, 1024], got '" + std::string(big) + "'").c_str(),
                           InvalidArgument);
    }
    for (const char* bad : {"0", "-1", "1025", "1.5", "x", "", "1e30", "99999999999999999999"}) {
      Args a = make();
      REQUIRE(a.parse({"--seq", bad}));
      CHECK_THROWS_WITH_AS(a.integer("seq", 1, 1024), doctest::Contains("--seq takes a whole number in [1, 1024]"), InvalidArgument);
    }
    Args a = make();
    REQUIRE(a.parse({"--seq", "1k"}));
    CHECK(a.integer("seq", 1, 1024) == 1024);
    CHECK(a.integer<std::uint64_t>("seq", 0, INT64_MAX) == 1024u);
    CHECK(a.integer<std::int64_t>("seq", 1, std::int64_t{1} << 40) == 1024);
    // The bounds of the narrow type itself: INT32_MAX fits, one more does not.
    CHECK(parse_integer_as("2147483647", "--n", 0, INT32_MAX) == INT32_MAX);
    CHECK_THROWS_WITH_AS(parse_integer_as("2147483648", "--n", 0, INT32_MAX), "--n takes a whole number in [0, 2147483647], got '2147483648'",
                         InvalidArgument);
    CHECK(parse_integer_as<std::uint8_t>("255", "--b", 0, 255) == 255);
    CHECK_THROWS_AS(parse_integer_as<std::uint64_t>("1", "--b", 0, UINT64_MAX), std::logic_error);  // a range int64 cannot hold
  }

  TEST_CASE("Args::real: a number in the range, else the option and the range") {
    Args a = make();
    REQUIRE(a.parse({"--rate", "1e-45"}));
    CHECK(a.real("rate", 0, 100) == 1e-45);
    for (const char* bad : {"-0.5", "101", "nan", "inf", "1e400", "x", "", "0.5s", " 1"}) {
      Args b = make();
      REQUIRE(b.parse({"--rate", bad}));
      CHECK_THROWS_WITH_AS(b.real("rate", 0, 100), ("--rate takes a number in [0, 100], got '" + std::string(bad) + "'").c_str(),
                           InvalidArgument);
    }
  }

  TEST_CASE("parse_int_list") {
    CHECK(parse_int_list("128,256,1k", "--b") == std::vector<std::int64_t>{128, 256, 1024});
    CHECK(parse_int_list("7", "--b") == std::vector<std::int64_t>{7});
    CHECK(parse_int_list("1e3,0.5k", "--b") == std::vector<std::int64_t>{1000, 512});
    CHECK_THROWS_WITH_AS(parse_int_list("1,,2", "--b"), doctest::Contains("--b"), InvalidArgument);
    CHECK_THROWS_WITH_AS(parse_int_list("1,2,", "--b"), doctest::Contains("--b"), InvalidArgument);
    CHECK_THROWS_WITH_AS(parse_int_list("1,-2", "--b"), doctest::Contains("must not be negative"), InvalidArgument);
  }

  TEST_CASE("options, flags, defaults") {
    Args a = make();
    REQUIRE(a.parse({"--seq", "2k", "--causal", "--name=x", "--rate", "2.5"}));
    CHECK(a.int64("seq") == 2048);
    CHECK(a.has("causal"));
    CHECK(a.str("name") == "x");
    CHECK(a.seconds("rate", 0, 10) == 2.5);
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
    CHECK_THROWS_WITH_AS(a.int64("seq"), doctest::Contains("--seq expects a whole number"), InvalidArgument);
    CHECK_THROWS_WITH_AS(a.seconds("rate", 0, 10), doctest::Contains("--rate expects seconds between 0 and 10, got 'fast'"),
                         InvalidArgument);
  }

  TEST_CASE("durations: one parser with a range; nan, inf, negative and huge values are refused as what they are") {
    for (const char* bad : {"nan", "-nan", "inf", "-1", "0", "1e400", "86401", "1s", ""}) {
      CAPTURE(bad);
      Args a = make();
      REQUIRE(a.parse({"--rate", bad}));
      const std::string want = std::string("--rate expects seconds between 0.001 and 86400, got '") + bad + "'";
      CHECK_THROWS_WITH_AS(a.seconds("rate", 0.001, 86400), doctest::Contains(want.c_str()), InvalidArgument);
    }
    Args a = make();
    REQUIRE(a.parse({"--rate", "0.5"}));
    CHECK(a.seconds("rate", 0.001, 86400) == 0.5);
    CHECK(a.seconds("rate", 0, 1) == 0.5);
  }

  TEST_CASE("help lists every option with its default, the common options and the exit codes") {
    const std::string h = make().epilogue("what the output means").help();
    CHECK(h.find("usage: ringattn test") != std::string::npos);
    CHECK(h.find("--seq N") != std::string::npos);
    CHECK(h.find("(default 1024)") != std::string::npos);
    CHECK(h.find("--causal") != std::string::npos);
    CHECK(h.find("--log-level LEVEL") != std::string::npos);
    CHECK(h.find("--quiet") != std::string::npos);
    CHECK(h.find("what the output means") != std::string::npos);
    CHECK(h.find("exit codes: 0 success; 1 failure") != std::string::npos);
    CHECK(h.find("2 usage error") != std::string::npos);
    CHECK(h.find("3 unexpected") != std::string::npos);
  }

  TEST_CASE("internal options are accepted but not listed by --help") {
    Args a("bench overlap", "sweep");
    a.option("b", "LIST", "block sizes").internal("worker", "", "run as a member").internal("rank", "R", "member rank");
    const std::string h = a.help();
    CHECK(h.find("--b LIST") != std::string::npos);
    CHECK(h.find("--worker") == std::string::npos);
    CHECK(h.find("--rank") == std::string::npos);
    CHECK(h.find("member rank") == std::string::npos);
    REQUIRE(a.parse({"--worker", "--rank", "1"}));
    CHECK(a.has("worker"));
    CHECK(a.int64("rank") == 1);
  }

  TEST_CASE("--log-level sets every logger, existing and future; unknown levels are refused") {
    LogLevelReset reset;
    auto before = ringattn::logger("cli-test-old");
    Args a = make();
    REQUIRE(a.parse({"--log-level", "debug"}));
    CHECK(ringattn::log_level() == ringattn::LogLevel::debug);
    CHECK(before->level() == spdlog::level::debug);
    CHECK(ringattn::logger("cli-test-new")->level() == spdlog::level::debug);
    CHECK(a.log_level() == "debug");
    Args off = make();
    REQUIRE(off.parse({"--log-level=off"}));
    CHECK(before->level() == spdlog::level::off);
    CHECK_THROWS_WITH_AS(make().parse({"--log-level", "loud"}),
                         "--log-level expects trace, debug, info, warn, error or off, got 'loud'", InvalidArgument);
    Args none = make();
    REQUIRE(none.parse({}));
    CHECK_FALSE(none.log_level());
  }

  TEST_CASE("--quiet means level error, unless --log-level says otherwise") {
    LogLevelReset reset;
    Args q = make();
    REQUIRE(q.parse({"--quiet"}));
    CHECK(q.quiet());
    CHECK(q.log_level() == "error");
    CHECK(ringattn::log_level() == ringattn::LogLevel::error);
    Args both = make();
    REQUIRE(both.parse({"--quiet", "--log-level", "warn"}));
    CHECK(both.log_level() == "warn");
    CHECK(ringattn::log_level() == ringattn::LogLevel::warn);
  }

  TEST_CASE("SPDLOG_LEVEL sets the levels; the flag wins over it, per-logger entries included") {
    LogLevelReset reset;
    ::setenv("SPDLOG_LEVEL", "warn,cli-test-env=trace", 1);
    ringattn::set_log_levels(std::getenv("SPDLOG_LEVEL"));  // as main() does
    CHECK(ringattn::logger("cli-test-env")->level() == spdlog::level::trace);
    CHECK(ringattn::logger("cli-test-env-other")->level() == spdlog::level::warn);
    Args a = make();
    REQUIRE(a.parse({"--log-level", "error"}));
    CHECK(ringattn::logger("cli-test-env")->level() == spdlog::level::err);
    CHECK(ringattn::logger("cli-test-env-later")->level() == spdlog::level::err);
  }

  TEST_CASE("json_quote escapes quotes, backslashes and control characters") {
    CHECK(json_quote("plain") == "\"plain\"");
    CHECK(json_quote("a \"b\" \\ c") == "\"a \\\"b\\\" \\\\ c\"");
    // nlohmann's escapes (the writer since issue 17; it wrote \u000a and \u0009 before): the
    // short forms where JSON has them, \u00XX for the other control characters.
    CHECK(json_quote("line\nnext\t") == "\"line\\nnext\\t\"");
    CHECK(json_quote(std::string("a\x01", 2)) == "\"a\\u0001\"");
    CHECK(json_quote("bad \xff utf-8") == "\"bad \xef\xbf\xbd utf-8\"");  // U+FFFD: always valid JSON
    CHECK(infer::parse_json(json_quote("line\nnext\t\x01")).get<std::string>() == "line\nnext\t\x01");
    JsonObject o;
    o.add("ok", false).add("n", 3).add("x", 0.5).add("inf", std::numeric_limits<double>::infinity()).add("s", "it's");
    CHECK(o.str() == "{\"ok\":false,\"n\":3,\"x\":0.5,\"inf\":null,\"s\":\"it's\"}");
  }
}
