// The launcher's toolkit (include/ringattn/launch.hpp): tokens, ring ids, addresses, and a
// rendezvous served outside the ring that ranks join as RingOptions::master; and the
// arguments Ring::inject_fault refuses (its faults are the integration suite's).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "ringattn/error.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/link_probe.hpp"
#include "ringattn/ring.hpp"
#include "tests/error_of.hpp"
#include "tests/ring/ranks_as_threads.hpp"

using namespace ringattn;

using ringattn::test::error_of;

namespace {

bool is_hex(const std::string& s) { return s.find_first_not_of("0123456789abcdef") == std::string::npos; }

}  // namespace

TEST_CASE("launch: tokens are checked, fresh tokens are 64 hex digits, fingerprints 16 and stable") {
  const std::string a = generate_token(), b = generate_token();
  CHECK(a.size() == 64);
  CHECK(is_hex(a));
  CHECK(a != b);
  CHECK(token_fingerprint(a).size() == 16);
  CHECK(is_hex(token_fingerprint(a)));
  CHECK(token_fingerprint(a) == token_fingerprint(a));
  CHECK(token_fingerprint(a) != token_fingerprint(b));
  CHECK(checked_token(a, "x") == a);
  const std::string m = error_of([] { checked_token("short", "the launcher's pipe"); });
  CHECK(m.find("the launcher's pipe") != std::string::npos);
  CHECK(m.find("16") != std::string::npos);

  ::setenv(kTokenEnv, "an-operator-token-of-some-length", 1);
  CHECK(launcher_token() == "an-operator-token-of-some-length");
  CHECK(load_token() == "an-operator-token-of-some-length");
  ::setenv(kTokenEnv, "tiny", 1);
  CHECK(error_of([] { launcher_token(); }).find("environment variable RINGATTN_TOKEN") != std::string::npos);
  ::unsetenv(kTokenEnv);
  CHECK(launcher_token().size() == 64);  // none set: a fresh one
  CHECK(error_of([] { load_token(); }).find("RINGATTN_TOKEN") != std::string::npos);
}

TEST_CASE("launch: ring ids are positive and fresh; host:port addresses parse or name the flag") {
  std::set<std::uint64_t> ids;
  for (int i = 0; i < 64; ++i) {
    const std::uint64_t id = new_ring_id();
    CHECK(id < (std::uint64_t{1} << 63));
    ids.insert(id);
  }
  CHECK(ids.size() == 64);
  const HostPort a = parse_host_port("127.0.0.1:8470", "--control");
  CHECK(a.host == "127.0.0.1");
  CHECK(a.port == 8470);
  CHECK(a.text() == "127.0.0.1:8470");
  const HostPort v6 = parse_host_port("[::1]:9", "--control");
  CHECK(v6.host == "::1");
  CHECK(v6.text() == "[::1]:9");
  for (const char* bad : {"no-port", ":80", "host:", "h:70000", "h:x"})
    CHECK(error_of([&] { parse_host_port(bad, "--control"); }).find("--control") != std::string::npos);
  CHECK(local_address_towards("127.0.0.1:9") == "127.0.0.1");
}

TEST_CASE("launch: ranks find each other through a RendezvousServer of the launcher's and connect") {
  const int world = 3;
  RingOptions shape = test::options(0, world, "");
  shape.ring_id = new_ring_id();
  RendezvousServer server("127.0.0.1:0", shape, 30);
  REQUIRE(server.port() != 0);
  const std::string master = "127.0.0.1:" + std::to_string(server.port());
  const auto errors = test::on_ranks(world, [&](int r) {
    RingOptions o = test::options(r, world, master);
    o.ring_id = shape.ring_id;
    o.master_is_external = true;
    Ring ring = Ring::connect(o);
    CHECK(ring.world_size() == world);
    ring.close();
  });
  for (const auto& e : errors) CHECK(e == "");
  CHECK(server.wait() == "");
}

TEST_CASE("launch: a RendezvousServer refuses bad options before it binds") {
  RingOptions o = test::options(0, 0, "");
  CHECK(error_of([&] { RendezvousServer("127.0.0.1:0", o, 5); }).find("world_size = 0") != std::string::npos);
  o.world_size = 2;
  CHECK(error_of([&] { RendezvousServer("127.0.0.1:0", o, 0); }).find("timeout_seconds") != std::string::npos);
  o.token = "short";
  CHECK(error_of([&] { RendezvousServer("127.0.0.1:0", o, 5); }).find("RingOptions::token") != std::string::npos);
  o.token = test::kToken;
  o.limits.max_rows = 0;
  CHECK(error_of([&] { RendezvousServer("127.0.0.1:0", o, 5); }).find("max_rows") != std::string::npos);
  o.limits.max_rows = 16;
  CHECK(error_of([&] { RendezvousServer("no-port", o, 5); }).find("rendezvous address") != std::string::npos);
}

TEST_CASE("launch: Ring::inject_fault refuses a step outside the ring and a negative delay") {
  RingOptions o = test::options(0, 1, "");
  Ring ring = Ring::connect(o);
  CHECK(error_of([&] { ring.inject_fault(Ring::Fault::exit, 1); }).find("step = 1 must be in 0..0") != std::string::npos);
  CHECK(error_of([&] { ring.inject_fault(Ring::Fault::corrupt, 0); }).find("must be in 1..") != std::string::npos);
  CHECK(error_of([&] { ring.inject_fault(Ring::Fault::slow, 0, -1); }).find("slow_seconds") != std::string::npos);
  CHECK(error_of([&] { ring.inject_fault(Ring::Fault::slow, 0, 0); }) == "");
}

// Issue 45: every timeout a caller passes is finite seconds in (0, 1e6] (seconds * 1000 as
// an int64 was undefined for inf or 1e300), and LinkProbe's depth is bounded.
TEST_CASE("launch: a RendezvousServer's and a LinkProbe's timeouts and a LinkProbe's depth are bounded") {
  const RingOptions o = test::options(0, 2, "");
  for (const double bad : {HUGE_VAL, std::nan(""), 1e300, -5.0}) {
    CAPTURE(bad);
    CHECK(error_of([&] { RendezvousServer("127.0.0.1:0", o, bad); }).find("timeout_seconds = ") != std::string::npos);
    LinkProbeOptions p;
    p.token = test::kToken;
    p.timeout = bad;
    CHECK(error_of([&] { LinkProbe end(p); }).find("LinkProbe: timeout = ") != std::string::npos);
    p.timeout = 30;
    p.connect_timeout = bad;
    CHECK(error_of([&] { LinkProbe end(p); }).find("LinkProbe: connect_timeout = ") != std::string::npos);
  }
  LinkProbeOptions p;
  p.token = test::kToken;
  p.max_block_bytes = kLinkProbeRowBytes;
  for (const int depth : {0, kMaxLinkProbeDepth + 1, 1 << 30}) {
    p.depth = depth;
    CHECK(error_of([&] { LinkProbe end(p); }).find("depth = " + std::to_string(depth) + " must be in 1..64") !=
          std::string::npos);
  }
  p.depth = 2;
  LinkProbe sender(p);  // listens only: the calls below are refused before anything is sent
  CHECK(error_of([&] { sender.send(kLinkProbeRowBytes, -1, 1.0); }).find("count = -1") != std::string::npos);
  CHECK(error_of([&] { sender.send(kLinkProbeRowBytes, 0, HUGE_VAL); }).find("LinkProbe::send: seconds = ") !=
        std::string::npos);
  sender.close();
}
