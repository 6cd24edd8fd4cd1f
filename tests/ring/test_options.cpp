// RingOptions::from_env: the variables of the launchers people already use.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "ringattn/error.hpp"
#include "ringattn/ring.hpp"

using namespace ringattn;

namespace {

// Sets variables for one test and removes every launcher variable afterwards.
struct Env {
  Env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    clear();
    for (auto [k, v] : vars) ::setenv(k, v, 1);
  }
  ~Env() { clear(); }
  static void clear() {
    for (const char* k : {"RINGATTN_RANK", "RINGATTN_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "RANK", "WORLD_SIZE",
                          "RINGATTN_PEERS", "RINGATTN_MASTER", "MASTER_ADDR", "MASTER_PORT", "RINGATTN_TOKEN",
                          "RINGATTN_TIMEOUT", "RINGATTN_MAX_ROWS", "RINGATTN_TLS", "RINGATTN_THREADS"})
      ::unsetenv(k);
  }
};

}  // namespace

TEST_CASE("from_env: Open MPI, Slurm, PMI and torchrun variables name the rank and world") {
  {
    Env e{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"RINGATTN_MASTER", "10.0.0.1:29500"}};
    const auto o = RingOptions::from_env();
    CHECK(o.rank == 2);
    CHECK(o.world_size == 3);
    CHECK(o.master == "10.0.0.1:29500");
  }
  {
    Env e{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "7000"}};
    const auto o = RingOptions::from_env();
    CHECK(o.rank == 1);
    CHECK(o.world_size == 4);
    CHECK(o.master == "node01:7000");
  }
  {
    Env e{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"RINGATTN_PEERS", "a:1,b:2"}, {"RINGATTN_TOKEN", "t0123456789abcdef"}};
    const auto o = RingOptions::from_env();
    CHECK(o.peers == std::vector<std::string>{"a:1", "b:2"});
    CHECK(o.token == "t0123456789abcdef");
  }
  {  // ringattn's own variables win over a launcher's
    Env e{{"RINGATTN_RANK", "3"}, {"RINGATTN_WORLD_SIZE", "5"}, {"PMI_RANK", "1"}, {"PMI_SIZE", "2"},
          {"RINGATTN_MASTER", "h:1"}, {"RINGATTN_TIMEOUT", "2.5"}, {"RINGATTN_MAX_ROWS", "4096"}, {"RINGATTN_TLS", "1"}};
    const auto o = RingOptions::from_env();
    CHECK(o.rank == 3);
    CHECK(o.world_size == 5);
    CHECK(o.timeout == 2.5);
    CHECK(o.limits.max_rows == 4096);
    CHECK(o.tls);
  }
}

TEST_CASE("from_env: what is missing or malformed is named") {
  {
    Env e{};
    CHECK_THROWS_WITH_AS(RingOptions::from_env(), doctest::Contains("RINGATTN_RANK"), InvalidArgument);
  }
  {
    Env e{{"RANK", "0"}, {"WORLD_SIZE", "2"}};
    CHECK_THROWS_WITH_AS(RingOptions::from_env(), doctest::Contains("RINGATTN_MASTER"), InvalidArgument);
  }
  {
    Env e{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"RINGATTN_MASTER", "h:1"}};
    CHECK_THROWS_WITH_AS(RingOptions::from_env(), doctest::Contains("RANK='2'"), InvalidArgument);
  }
  {
    Env e{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
    CHECK_THROWS_WITH_AS(RingOptions::from_env(), doctest::Contains("MASTER_PORT"), InvalidArgument);
  }
  {
    Env e{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"RINGATTN_MASTER", "h:1"}, {"RINGATTN_THREADS", "many"}};
    CHECK_THROWS_WITH_AS(RingOptions::from_env(), doctest::Contains("RINGATTN_THREADS='many'"), InvalidArgument);
  }
  for (const char* t : {"inf", "nan", "1e300", "0", "-2", "2s"}) {  // finite seconds in (0, 1e6]
    Env e{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"RINGATTN_MASTER", "h:1"}, {"RINGATTN_TIMEOUT", t}};
    CHECK_THROWS_WITH_AS(RingOptions::from_env(), doctest::Contains(("RINGATTN_TIMEOUT='" + std::string(t) + "'").c_str()),
                         InvalidArgument);
  }
}
