// doctest's main, and the skips of tests/skip.hpp turned into exit codes meson reads:
//   a failure, or no test case matching the filters (a renamed case must not turn its meson
//   test into an empty pass)                                   -> 1
//   every test case that ran skipped, CI unset                 -> 77, meson's SKIP
//   every test case that ran skipped, CI=true                  -> 1 (CI machines must have what
//                                                                 the tests need)
//   some test cases skipped, others ran                        -> 1 (the meson test mixes cases
//                                                                 that need a prerequisite with
//                                                                 cases that do not: split it)
//   otherwise                                                  -> 0
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <iostream>
#include <set>
#include <string>

#include "tests/skip.hpp"

namespace {

struct Ledger {
  unsigned started = 0;          // test cases entered
  unsigned matched = 0;          // test cases passing the filters
  std::set<unsigned> skipped;    // the ordinals (1, 2, ...) of those that called test::skip
  std::set<std::string> reasons;
};

Ledger& ledger() {
  static Ledger l;
  return l;
}

// Listens beside the reporter: which test case runs, and how many matched the filters.
struct SkipListener : doctest::IReporter {
  explicit SkipListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { ledger().matched = s.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData&) override { ++ledger().started; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

REGISTER_LISTENER("skips", 1, SkipListener);

void test::skip(const std::string& why) {
  MESSAGE("skipped: " << why);
  ledger().skipped.insert(ledger().started);
  ledger().reasons.insert(why);
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit() || status != 0) return status;
  const Ledger& l = ledger();
  if (l.matched == 0) {
    std::cout << "FAILED: no test case matches the filters given\n";
    return 1;
  }
  if (l.skipped.empty()) return 0;
  for (const auto& why : l.reasons) std::cout << "skipped: " << why << "\n";
  if (l.skipped.size() < l.started) {
    std::cout << "FAILED: " << l.skipped.size() << " of " << l.started
              << " test cases skipped: a meson test must run the cases that need a prerequisite apart from the "
                 "others (filter them into their own test() in meson.build)\n";
    return 1;
  }
  if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true") {
    std::cout << "FAILED: CI=true, so a missing prerequisite is a failure\n";
    return 1;
  }
  return 77;
}
