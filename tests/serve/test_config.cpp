// `ringattn serve`'s configuration: TOML file < environment < flags, and errors that
// name where a bad value came from.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "ringattn/error.hpp"
#include "src/serve/job.hpp"
#include "src/serve/serve_config.hpp"

namespace ringattn::serve {
namespace {

struct TempToml {
  std::string path = (std::filesystem::temp_directory_path() / ("ringattn-test-" + std::to_string(::getpid()) + ".toml")).string();
  explicit TempToml(const std::string& text) { std::ofstream(path) << text; }
  ~TempToml() { std::filesystem::remove(path); }
};

struct Env {  // sets variables for the scope
  std::vector<std::string> names;
  Env(std::initializer_list<std::pair<const char*, const char*>> kv) {
    for (auto [k, v] : kv) {
      ::setenv(k, v, 1);
      names.emplace_back(k);
    }
  }
  ~Env() {
    for (auto& n : names) ::unsetenv(n.c_str());
  }
};

ServeConfig load(std::vector<std::string> argv) {
  cli::Args a("serve", "test");
  declare_serve_options(a);
  REQUIRE(a.parse(argv));
  return load_serve_config(a);
}

std::string error_of(std::vector<std::string> argv) {
  try {
    load(std::move(argv));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("serve config: the file, then the environment, then flags") {
  TempToml f(R"(world_size = 3
rank = 1
master = "10.0.0.1:7600"
control = "0.0.0.0:7701"
threads = 4
timeout = 12.5
tls = true
max_rows = 4096
log_format = "json"
wire_dtype = "bf16"
)");
  ServeConfig c = load({"--config", f.path});
  CHECK(c.ring.world_size == 3);
  CHECK(c.ring.rank == 1);
  CHECK(c.ring.master == "10.0.0.1:7600");
  CHECK(c.control == "0.0.0.0:7701");
  CHECK(c.ring.threads == 4);
  CHECK(c.ring.timeout == doctest::Approx(12.5));
  CHECK(c.ring.tls);
  CHECK(c.ring.limits.max_rows == 4096);
  CHECK(c.log_format == LogFormat::json);
  CHECK(c.wire_dtype == DType::bf16);
  CHECK(c.sources["threads"] == f.path + ": threads");
  {
    Env e({{"RINGATTN_THREADS", "2"}, {"SLURM_PROCID", "2"}});
    c = load({"--config", f.path});
    CHECK(c.ring.threads == 2);
    CHECK(c.ring.rank == 2);  // Slurm's rank beats the file
    CHECK(c.sources["threads"] == "RINGATTN_THREADS");
    c = load({"--config", f.path, "--threads", "1", "--rank", "0"});
    CHECK(c.ring.threads == 1);
    CHECK(c.ring.rank == 0);
    CHECK(c.sources["threads"] == "--threads");
  }
  {
    Env e({{"RINGATTN_CONFIG", f.path.c_str()}});
    CHECK(load({}).ring.world_size == 3);
  }
}

TEST_CASE("serve config: errors name the source of the bad value") {
  TempToml typo("world_size = 2\nrank = 0\nmaster = \"h:1\"\nthreds = 4\n");
  CHECK(error_of({"--config", typo.path}).find("unknown key 'threds'") != std::string::npos);
  TempToml type("world_size = \"two\"\n");
  CHECK(error_of({"--config", type.path}).find(": world_size must be a whole number") != std::string::npos);
  TempToml syntax("world_size = = 2\n");
  CHECK(error_of({"--config", syntax.path}).find(syntax.path + ":1:") != std::string::npos);
  CHECK(error_of({"--world-size", "2", "--rank", "2", "--master", "h:1"}).find("--rank takes a whole number in [0, 1], got '2'") !=
        std::string::npos);
  // Numbers past 32 bits are refused as what they are, never narrowed first (2^32 + 2 ran as 2),
  // from a flag, the file and the environment alike.
  CHECK(error_of({"--world-size", "4", "--rank", "0", "--master", "h:1", "--tp", "4294967298", "--model", "m"})
            .find("--tp takes a whole number in [1, 4096], got '4294967298'") != std::string::npos);
  CHECK(error_of({"--world-size", "1", "--rank", "0", "--threads", "4294967297"})
            .find("--threads takes a whole number in [0, 4096], got '4294967297'") != std::string::npos);
  {
    TempToml big("world_size = 4294967298\nrank = 0\n");
    CHECK(error_of({"--config", big.path}).find(": world_size takes a whole number in [1, 4096], got '4294967298'") != std::string::npos);
    Env e{{"RINGATTN_WORLD_SIZE", "4294967297"}};
    CHECK(error_of({"--rank", "0"}).find("RINGATTN_WORLD_SIZE takes a whole number in [1, 4096], got '4294967297'") != std::string::npos);
  }
  CHECK(error_of({"--world-size", "3", "--rank", "0"}).find("--master") != std::string::npos);
  CHECK(error_of({"--world-size", "3", "--rank", "0", "--peers", "a:1,b:2"}).find("--peers lists 2 addresses") !=
        std::string::npos);
  {
    Env e({{"RINGATTN_TIMEOUT", "soon"}});
    CHECK(error_of({"--world-size", "1", "--rank", "0"}).find("RINGATTN_TIMEOUT") != std::string::npos);
  }
  CHECK(error_of({"--world-size", "1", "--rank", "0", "--log-format", "xml"}).find("--log-format") != std::string::npos);
  CHECK(error_of({"--world-size", "1", "--rank", "0", "--model", "m.bin", "--tokenizer", "t.bin", "--weights-dtype",
                  "fp8"}).find("--weights-dtype = 'fp8': expected fp32, bf16, fp16 or q8_0") != std::string::npos);
  CHECK(error_of({"--world-size", "1", "--rank", "0", "--weights-dtype", "bf16"}).find("give the model too") != std::string::npos);
  CHECK(error_of({"--world-size", "1", "--rank", "0", "--tokenizer", "t.json", "--api", "off"}).find("no model") != std::string::npos);
  CHECK_FALSE(load({"--world-size", "1", "--rank", "0"}).weights_dtype);  // unset: as the checkpoint holds them
  // Tensor parallelism: T divides the world, splits a model, and is the ring's group size.
  CHECK(error_of({"--world-size", "3", "--rank", "0", "--peers", "a:1,b:2,c:3", "--model", "m.bin", "--tp", "2"})
            .find("--tp = 2 must divide the world size 3") != std::string::npos);
  CHECK(error_of({"--world-size", "2", "--rank", "0", "--peers", "a:1,b:2", "--tp", "2"}).find("give the model too") !=
        std::string::npos);
  {
    const ServeConfig c = load({"--world-size", "4", "--rank", "3", "--peers", "a:1,b:2,c:3,d:4", "--model", "m.bin", "--tp", "2"});
    CHECK(c.tp == 2);
    CHECK(c.ring.group_size == 2);
  }
  CHECK(load({"--world-size", "1", "--rank", "0", "--model", "m.bin", "--tokenizer", "t.bin", "--api", "off",
              "--weights-dtype", "bf16"}).weights_dtype == DType::bf16);
}

TEST_CASE("serve config: every key is a flag, and a world of one needs no peers") {
  cli::Args a("serve", "test");
  declare_serve_options(a);
  const std::string help = a.help();
  for (const auto& k : serve_config_keys()) {
    if (k == "log_level") continue;  // the common --log-level
    std::string flag = "--" + k;
    for (char& ch : flag)
      if (ch == '_') ch = '-';
    CHECK_MESSAGE(help.find(flag) != std::string::npos, flag);
  }
  const ServeConfig c = load({"--world-size", "1", "--rank", "0"});
  CHECK(c.ring.peers.empty());
  CHECK(c.ring.master.empty());
}

TEST_CASE("serve job requests: numbers that are not whole or not in range are refused as what they are") {
  const RingLimits limits;
  auto request_error = [&](const std::string& tokens) -> std::string {
    const std::string json = "{\"op\":\"submit\",\"tokens\":" + tokens +
                             ",\"heads\":8,\"kv_heads\":8,\"head_dim\":128,\"layout\":\"contiguous\",\"mask\":\"none\"}";
    try {
      parse_job_request(json, 3, limits, std::uint64_t{1} << 40);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  CHECK(request_error("512.5").find("tokens = 512.5 is not a whole number") != std::string::npos);
  CHECK(request_error("1e300").find("tokens = 1e+300 is outside") != std::string::npos);
  CHECK(request_error("-1e300").find("tokens = -1e+300 is outside") != std::string::npos);
  CHECK(request_error("512").empty());
}

TEST_CASE("serve config: limits no ring could have are refused at start, naming the key and the largest that fits") {
  const std::string e = error_of({"--world-size", "1", "--rank", "0", "--max-rows", "65536"});
  CHECK(e.find("--max-rows") != std::string::npos);
  CHECK(e.find("max_rows = 65536 is too large") != std::string::npos);
  const std::string said = "the largest max_rows that fits is ";
  const auto at = e.find(said);
  REQUIRE(at != std::string::npos);
  const std::string largest = std::to_string(std::stoll(e.substr(at + said.size())));
  CHECK(error_of({"--world-size", "1", "--rank", "0", "--max-rows", largest}).empty());  // it does fit
  CHECK_FALSE(error_of({"--world-size", "1", "--rank", "0", "--max-rows", std::to_string(std::stoll(largest) + 1)}).empty());
  CHECK(error_of({"--world-size", "1", "--rank", "0", "--max-rows", "32768"}).empty());
}

}  // namespace ringattn::serve

namespace ringattn::serve {

TEST_CASE("serve config: defaults that work for several daemons on one host (loopback metrics, threads shared)") {
  // Three daemons on this host by --peers (every loopback address is this host): a third of the cores each.
  ServeConfig c = load({"--rank", "1", "--world-size", "3", "--peers", "127.0.0.1:7601,127.0.0.2:7602,localhost:7603"});
  CHECK(c.daemons_here == 3);
  CHECK(c.cores >= 1);
  CHECK(c.ring.threads == std::max(1, c.cores / 3));
  CHECK(c.sources.count("threads") == 0);
  CHECK(c.metrics == "127.0.0.1:9464");  // loopback, not every interface
  CHECK(c.metrics_fallback);
  // One daemon per host: all the cores.
  c = load({"--rank", "0", "--world-size", "2", "--peers", "10.0.0.1:7600,10.0.0.2:7600"});
  CHECK(c.daemons_here == 1);
  CHECK(c.ring.threads == c.cores);
  // A loopback master: every daemon is on this host.
  c = load({"--rank", "0", "--world-size", "2", "--master", "127.0.0.1:7600"});
  CHECK(c.daemons_here == 2);
  CHECK(c.ring.threads == std::max(1, c.cores / 2));
  // A remote master tells nothing: this daemon alone.
  c = load({"--rank", "1", "--world-size", "4", "--master", "10.0.0.1:7600"});
  CHECK(c.daemons_here == 1);
  // Given: kept as given, and the metrics address too (no fallback to another port).
  c = load({"--rank", "0", "--world-size", "2", "--master", "127.0.0.1:7600", "--threads", "0", "--metrics", "0.0.0.0:9100"});
  CHECK(c.ring.threads == 0);
  CHECK(c.metrics == "0.0.0.0:9100");
  CHECK_FALSE(c.metrics_fallback);
}

}  // namespace ringattn::serve
