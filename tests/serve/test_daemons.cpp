// The daemons as an operator meets them: a ring of `ringattn serve` processes on
// loopback, jobs through `ringattn submit`, state through `ringattn status` and HTTP.
// Faults: a daemon killed or stopped mid-job, a client that goes away, SIGTERM. The
// assertions are about causes (which rank, which result); time bounds are hang guards
// that hold on a loaded 2-core machine.
#include <doctest/doctest.h>
#include <signal.h>

#include <array>
#include <chrono>
#include <functional>
#include <limits>
#include <span>
#include <filesystem>
#include <fstream>
#include <thread>

#include <asio/co_spawn.hpp>
#include <asio/this_coro.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <asio/io_context.hpp>

#include "ringattn/layout.hpp"
#include "src/serve/control_protocol.hpp"
#include "src/serve/job.hpp"
#include "tests/serve/daemon_ring.hpp"

namespace ringattn::stest {
namespace {

using itest::Inputs;
using itest::Shape;

constexpr double kTolF32 = 2e-5;
constexpr double kTolBf16 = 1e-2;

struct Checked {
  Outcome outcome;
  double err_o = 1e9, err_lse = 1e9;
};

// Submits `in` (written to a fresh directory) and compares O and lse with float64 attention.
Checked submit_and_check(DaemonRing& ring, int to, const Inputs& in, Mask mask, const std::vector<std::string>& extra) {
  ScratchDir d;
  in.write(d);
  Checked c;
  c.outcome = itest::run_ringattn(ring.submit_args(to, d.path().string(), extra), ring.env(), 180);
  if (c.outcome.exit_code != 0) return c;
  const auto ref = itest::dense_reference(in, mask);
  c.err_o = itest::max_abs_error(itest::read_npy_floats(d.file("o.npy")), ref.o);
  c.err_lse = itest::max_abs_error(itest::read_npy_floats(d.file("lse.npy")), ref.lse);
  return c;
}

bool contains(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

// Waits until `pred` or `seconds` pass; returns pred().
template <class Pred>
bool eventually(double seconds, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// A job long enough on one thread per daemon that a fault lands in the middle of it.
Shape long_shape() { return Shape{16384, 8, 8, 128}; }

// A raw client's whole conversation with rank `rank`'s control port: `talk` gets the
// authenticated connection and returns what the test looks at; "error: ..." if the
// exchange itself failed.
using Talk = std::function<asio::awaitable<std::string>(Channel&)>;
std::string raw_client(const DaemonRing& ring, int rank, const Talk& talk) {
  const std::string token = serve::client_secret(ring.token_file());
  asio::io_context io;
  std::string answer;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto c = co_await serve::connect_control(ring.control(rank), token, false, serve::Millis(15000));
        answer = co_await talk(c);
      },
      [&](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          answer = std::string("error: ") + x.what();
        }
      });
  io.run();
  return answer;
}

const serve::Millis kIdle(15000);

// One JSON request and the daemon's first answer.
std::string control_exchange(const DaemonRing& ring, int rank, const std::string& request) {
  return raw_client(ring, rank, [&](Channel& c) -> asio::awaitable<std::string> {
    co_await c.write_json(request);
    co_return co_await c.read_json();
  });
}

// A small job for raw clients: 96 tokens, 2 heads of 32, contiguous.
serve::JobRequest small_request() {
  serve::JobRequest req;
  req.tokens = 96;
  req.heads = req.kv_heads = 2;
  req.head_dim = 32;
  return req;
}

// The daemon's events up to `until` ("upload", "done") or an error; returns the last one.
asio::awaitable<std::string> events_until(Channel& c, const std::string& until) {
  for (;;) {
    std::string e = co_await c.read_json();
    if (e.find("\"event\":\"" + until + "\"") != std::string::npos || e.find("\"event\":\"error\"") != std::string::npos)
      co_return e;
  }
}

// Sends `req`, reads the daemon's events up to `until` or an error; returns the last one.
asio::awaitable<std::string> request_until(Channel& c, const serve::JobRequest& req,
                                           const std::string& until) {
  co_await c.write_json(serve::job_request_json(req));
  co_return co_await events_until(c, until);
}

bool is_event(const std::string& e, const std::string& name) {
  return e.find("\"event\":\"" + name + "\"") != std::string::npos;
}

}  // namespace

TEST_CASE("serve: a ring of 3 daemons is exact for every layout, mask and dtype, and redirects clients to rank 0") {
  DaemonRing ring({});
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  struct Case {
    const char* layout;
    Mask mask;
    DType dtype;
    int to;
  };
  const Case cases[] = {{"contiguous", Mask::none(), DType::f32, 0},
                        {"zigzag", Mask::causal(), DType::f32, 1},
                        {"striped", Mask::sliding_window(37), DType::f32, 2},
                        {"zigzag", Mask::causal(), DType::bf16, 0}};
  unsigned seed = 10;
  for (const auto& c : cases) {
    const Inputs in(Shape{301, 8, 2, 64}, seed++, c.dtype);
    std::vector<std::string> extra = {"--layout", c.layout, "--dtype", std::string(to_string(c.dtype))};
    if (c.mask.kind == MaskKind::causal) extra.push_back("--causal");
    if (c.mask.kind == MaskKind::window) extra.insert(extra.end(), {"--window", std::to_string(c.mask.window)});
    const Checked r = submit_and_check(ring, c.to, in, c.mask, extra);
    INFO(c.layout << " " << to_string(c.mask) << " " << to_string(c.dtype) << " via rank " << c.to << ": " << r.outcome.err);
    REQUIRE(r.outcome.exit_code == 0);
    CHECK(r.err_o <= (c.dtype == DType::bf16 ? kTolBf16 : kTolF32));
    CHECK(r.err_lse <= (c.dtype == DType::bf16 ? kTolBf16 : kTolF32));
    if (c.to != 0) CHECK(contains(r.outcome.err, "not rank 0"));
  }
  // status names every node, ready, with its last job.
  const auto s = itest::run_ringattn({"status", "--to", ring.control(2), "--json"}, ring.env(), 30);
  INFO(s.out << s.err);
  CHECK(s.exit_code == 0);
  CHECK(contains(s.out, "\"ready\":true"));
  for (int r = 0; r < 3; ++r) CHECK(contains(s.out, "\"control\":\"" + ring.control(r) + "\""));
  CHECK(contains(s.out, "\"last_job\":{\"id\":4"));
}

TEST_CASE("serve: four clients at once all get exact results") {
  DaemonRing ring({});
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  std::vector<std::unique_ptr<ScratchDir>> dirs;
  std::vector<Inputs> inputs;
  std::vector<std::unique_ptr<itest::Spawned>> clients;
  for (int i = 0; i < 4; ++i) {
    dirs.push_back(std::make_unique<ScratchDir>());
    inputs.emplace_back(Shape{256 + 64 * i, 4, 4, 32}, 100 + i, DType::f32);
    inputs.back().write(*dirs.back());
  }
  for (int i = 0; i < 4; ++i)
    clients.push_back(std::make_unique<itest::Spawned>(ring.submit_args(i % 3, dirs[static_cast<std::size_t>(i)]->path().string(), {"--causal"}), ring.env()));
  for (int i = 0; i < 4; ++i) {
    const Outcome o = clients[static_cast<std::size_t>(i)]->wait(180);
    INFO("client " << i << ": " << o.err);
    REQUIRE(o.exit_code == 0);
    const auto ref = itest::dense_reference(inputs[static_cast<std::size_t>(i)], Mask::causal());
    CHECK(itest::max_abs_error(itest::read_npy_floats(dirs[static_cast<std::size_t>(i)]->file("o.npy")), ref.o) <= kTolF32);
  }
}

TEST_CASE("serve: a daemon killed mid-job is named in the client's one line; the others stay up; it rejoins; the next job is exact") {
  DaemonRing ring({});
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  ScratchDir d;
  Inputs(long_shape(), 7, DType::f32).write(d);
  itest::Spawned client(ring.submit_args(0, d.path().string(), {}), ring.env());
  REQUIRE(eventually(60, [&] { client.pump(); return contains(client.err(), "running on 3 ranks"); }));
  ring.signal(1, SIGKILL);
  const Outcome o = client.wait(60);
  INFO(o.err);
  CHECK(o.exit_code == 1);
  const auto lines = o.error_lines();
  REQUIRE(!lines.empty());
  CHECK(contains(lines.back(), "rank 1"));
  CHECK(!std::filesystem::exists(d.file("o.npy")));
  CHECK(ring.running(0));
  CHECK(ring.running(2));
  ring.start(1);
  REQUIRE(ring.wait_ready(60));
  const Inputs in(Shape{300, 8, 8, 64}, 8, DType::f32);
  const Checked r = submit_and_check(ring, 0, in, Mask::causal(), {"--causal"});
  INFO(r.outcome.err);
  REQUIRE(r.outcome.exit_code == 0);
  CHECK(r.err_o <= kTolF32);
}

// The deadline's own cases: --timeout 3.
RingConfig short_timeout() {
  RingConfig c;
  c.timeout = 3;
  return c;
}

TEST_CASE("serve: a stopped daemon (SIGSTOP) is named within about the timeout; after SIGCONT the ring re-forms") {
  DaemonRing ring(short_timeout());
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  ScratchDir d;
  Inputs(long_shape(), 9, DType::f32).write(d);
  itest::Spawned client(ring.submit_args(0, d.path().string(), {}), ring.env());
  REQUIRE(eventually(60, [&] { client.pump(); return contains(client.err(), "running on 3 ranks"); }));
  ring.signal(2, SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome o = client.wait(90);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ring.signal(2, SIGCONT);
  INFO(o.err);
  CHECK(o.exit_code == 1);
  REQUIRE(!o.error_lines().empty());
  CHECK(contains(o.error_lines().back(), "rank 2"));
  CHECK(took < 60);  // a hang guard: the daemons' timeout is 3 s, the rest is load
  REQUIRE(ring.wait_ready(60));
  const Checked r = submit_and_check(ring, 0, Inputs(Shape{200, 4, 4, 32}, 10, DType::f32), Mask::none(), {});
  CHECK(r.outcome.exit_code == 0);
  CHECK(r.err_o <= kTolF32);
}

TEST_CASE("serve: a client that disconnects mid-job aborts it, and the daemons serve the next job") {
  DaemonRing ring({});
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  ScratchDir d;
  Inputs(long_shape(), 11, DType::f32).write(d);
  {
    itest::Spawned client(ring.submit_args(0, d.path().string(), {}), ring.env());
    REQUIRE(eventually(60, [&] { client.pump(); return contains(client.err(), "running on 3 ranks"); }));
  }  // the client's group is SIGKILLed here
  CHECK(eventually(60, [&] { return contains(ring.log(0), "aborted: its client disconnected"); }));
  const Checked r = submit_and_check(ring, 0, Inputs(Shape{200, 4, 4, 32}, 12, DType::f32), Mask::causal(), {"--causal"});
  INFO(r.outcome.err);
  CHECK(r.outcome.exit_code == 0);
  CHECK(r.err_o <= kTolF32);
  for (int k = 0; k < 3; ++k) CHECK(ring.running(k));
}

TEST_CASE("serve: SIGTERM drains: the running job finishes and the daemon exits 0") {
  DaemonRing ring({});
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  ScratchDir d;
  const Inputs in(Shape{4096, 8, 8, 128}, 13, DType::f32);
  in.write(d);
  // The reference: the same job undisturbed. The ring is deterministic, so the drained job
  // must give exactly these bits (a float64 reference of this size took 50 s of the suite,
  // minutes under the sanitizers; the jobs' float64 exactness is the first case's).
  const Outcome first = itest::run_ringattn(ring.submit_args(0, d.path().string(), {}), ring.env(), 180);
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  const std::vector<float> want = itest::read_npy_floats(d.file("o.npy"));
  std::filesystem::remove(d.file("o.npy"));
  std::filesystem::remove(d.file("lse.npy"));
  itest::Spawned client(ring.submit_args(0, d.path().string(), {}), ring.env());
  REQUIRE(eventually(60, [&] { client.pump(); return contains(client.err(), "running on 3 ranks"); }));
  ring.signal(0, SIGTERM);
  const Outcome o = client.wait(120);
  INFO(o.err);
  CHECK(o.exit_code == 0);
  const Outcome daemon = ring.stop(0, 60);
  CHECK(daemon.exit_code == 0);
  CHECK(contains(ring.log(0), "draining"));
  CHECK(itest::read_npy_floats(d.file("o.npy")) == want);
  // The others noticed at once and wait for rank 0 to come back.
  CHECK(eventually(30, [&] { return http_get(ring.metrics(1), "/healthz").first == 503; }));
}

TEST_CASE("serve: SIGTERM to a worker drains it too: the running job is delivered, then the worker leaves (3 runs)") {
  DaemonRing ring({});
  INFO(ring.logs());
  ScratchDir d;
  const Inputs in(Shape{8192, 8, 2, 128}, 15, DType::f32);
  in.write(d);
  // The reference: the same job undisturbed (the ring is deterministic, so a drained job
  // must give exactly these bits; a float64 reference of this size would take half a minute).
  REQUIRE(ring.wait_ready(60));
  const Outcome first = itest::run_ringattn(ring.submit_args(0, d.path().string(), {"--causal"}), ring.env(), 180);
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  const std::vector<float> want = itest::read_npy_floats(d.file("o.npy"));
  std::filesystem::remove(d.file("o.npy"));
  std::filesystem::remove(d.file("lse.npy"));
  for (int run = 0; run < 3; ++run) {
    CAPTURE(run);
    REQUIRE(ring.wait_ready(60));
    itest::Spawned client(ring.submit_args(0, d.path().string(), {"--causal"}), ring.env());
    REQUIRE(eventually(60, [&] { client.pump(); return contains(client.err(), "running on 3 ranks"); }));
    ring.signal(1, SIGTERM);
    const Outcome o = client.wait(120);
    INFO(o.err);
    CHECK(o.exit_code == 0);
    CHECK(itest::read_npy_floats(d.file("o.npy")) == want);
    const Outcome worker = ring.stop(1, 60);
    CHECK(worker.exit_code == 0);
    std::filesystem::remove(d.file("o.npy"));
    std::filesystem::remove(d.file("lse.npy"));
    ring.start(1);
  }
}

TEST_CASE("serve: SIGTERM to an idle worker: rank 0 lets it go without alarm; a job sent meanwhile waits for the ring and is exact") {
  DaemonRing ring({});
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  ring.signal(2, SIGTERM);
  // Released, not timed out: it leaves well before the grace period (30 s) would let it.
  const Outcome worker = ring.stop(2, 25);
  CHECK(worker.exit_code == 0);
  CHECK(contains(ring.log(2), "asked rank 0 to let rank 2 leave"));
  CHECK(eventually(30, [&] { return contains(ring.log(0), "rank 2 asked to leave (draining)"); }));
  CHECK(eventually(30, [&] { return contains(ring.log(1), "rank 0 released the ring"); }));
  for (int r : {0, 1}) CHECK_FALSE(contains(ring.log(r), "the ring broke"));
  CHECK_FALSE(contains(ring.log(2), "did not let it leave"));

  ScratchDir d;
  const Inputs in(Shape{1024, 4, 2, 64}, 17, DType::f32);
  in.write(d);
  itest::Spawned client(ring.submit_args(0, d.path().string(), {"--causal"}), ring.env());
  REQUIRE(eventually(60, [&] { client.pump(); return contains(client.err(), "queued at position 1 (ring forming)"); }));
  ring.start(2);
  const Outcome o = client.wait(120);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  const std::vector<float> got = itest::read_npy_floats(d.file("o.npy"));
  std::filesystem::remove(d.file("o.npy"));
  std::filesystem::remove(d.file("lse.npy"));
  // The ring is deterministic: the same job on the settled ring gives the same bits.
  const Outcome again = itest::run_ringattn(ring.submit_args(0, d.path().string(), {"--causal"}), ring.env(), 120);
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  CHECK(itest::read_npy_floats(d.file("o.npy")) == got);
}

TEST_CASE("serve: a client over the control port's connection limit is told so, not that it may need --tls") {
  DaemonRing ring({});
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  // 16 authenticated clients that send nothing (each holds a slot until the daemon's idle deadline).
  const std::string token = serve::client_secret(ring.token_file());
  asio::io_context io;
  std::vector<Channel> held;
  int connected = 0;
  for (int i = 0; i < 16; ++i)
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          held.push_back(co_await serve::connect_control(ring.control(0), token, false, serve::Millis(15000)));
          ++connected;
        },
        asio::detached);
  io.run();
  REQUIRE(connected == 16);
  const Outcome o = itest::run_ringattn({"status", "--to", ring.control(0), "--timeout", "10"}, ring.env(), 60);
  INFO(o.err);
  CHECK(o.exit_code != 0);
  CHECK(contains(o.err, "at its limit of 16 client connections"));
  CHECK_FALSE(contains(o.err, "--tls"));
  held.clear();  // closed: the next client gets in
  CHECK(eventually(30, [&] { return itest::run_ringattn({"status", "--to", ring.control(0)}, ring.env(), 60).exit_code == 0; }));
}

TEST_CASE("serve: a job whose upload holds NaN is recorded as refused, with the reason once, not as a client gone") {
  DaemonRing ring({});
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  // A raw client (submit itself refuses NaN before sending): the request, then each rank's
  // K, V and Q as the daemon asks, with one NaN in rank 1's Q.
  const serve::JobRequest req = small_request();
  const std::string answer = raw_client(ring, 0, [&](Channel& c) -> asio::awaitable<std::string> {
    const std::string e = co_await request_until(c, req, "upload");
    if (!is_event(e, "upload")) co_return e;
    for (int rank : {1, 2, 0}) {
      const auto rows = static_cast<std::size_t>(shard_positions(req.layout, req.tokens, 3, rank).size());
      std::vector<float> kv(rows * 2 * 32, 0.5f), q(rows * 2 * 32, 0.25f);
      if (rank == 1) q[7] = std::numeric_limits<float>::quiet_NaN();
      co_await c.write_tensor(std::as_bytes(std::span(kv)));
      co_await c.write_tensor(std::as_bytes(std::span(kv)));
      co_await c.write_tensor(std::as_bytes(std::span(q)));
      if (rank == 1) break;  // the daemon answers the bad shard at once
    }
    co_return co_await c.read_json();
  });
  INFO(answer);
  CHECK(contains(answer, "NaN"));
  CHECK(eventually(30, [&] { return contains(ring.log(0), "its upload was refused"); }));
  const std::string log = ring.log(0);
  INFO(log);
  CHECK_FALSE(contains(log, "went away during the upload"));
  CHECK_FALSE(contains(log, "aborted: job"));  // the reason once, not "job 1 aborted: job 1 aborted: ..."
  const Checked r = submit_and_check(ring, 0, Inputs(Shape{200, 4, 4, 32}, 16, DType::f32), Mask::none(), {});
  CHECK(r.outcome.exit_code == 0);
}

TEST_CASE("serve: the upload deadline measures silence: a slow but steady client is served, whichever shard it is slow on") {
  DaemonRing ring(short_timeout());  // what the daemon waits on a silent client
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  const serve::JobRequest req = small_request();
  // Slow on the first tensor (rank 1's, before any worker has its shard) and on the last
  // (rank 0's own, when the workers would already be computing if rank 0 forwarded their
  // shards before it had them all, and would wait on rank 0 longer than the timeout).
  for (const int slow : {0, 8}) {
    CAPTURE(slow);
    const std::string answer = raw_client(ring, 0, [&](Channel& c) -> asio::awaitable<std::string> {
      const std::string e = co_await request_until(c, req, "upload");
      if (!is_event(e, "upload")) co_return e;
      int index = 0;
      for (int rank : {1, 2, 0}) {
        const auto rows = static_cast<std::size_t>(shard_positions(req.layout, req.tokens, 3, rank).size());
        std::vector<float> t(rows * 2 * 32, 0.5f);
        for (int tensor = 0; tensor < 3; ++tensor, ++index) {
          if (index != slow) {
            co_await c.write_tensor(std::as_bytes(std::span(t)));
            continue;
          }
          // This tensor by hand: its header, then 2 KiB every 1.5 s, 6 s in all, twice the
          // daemon's deadline but never silent for longer than half of it.
          std::array<std::uint8_t, 16> head{'R', 'A', 'C', 'T', 2};
          const std::uint64_t n = t.size() * sizeof(float);
          for (int b = 0; b < 8; ++b) head[8 + b] = static_cast<std::uint8_t>(n >> (8 * b));
          co_await c.write_bytes(std::as_bytes(std::span(head)));
          const auto* bytes = reinterpret_cast<const std::byte*>(t.data());
          for (std::size_t at = 0; at < n; at += 2048) {
            asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(1500));
            co_await pause.async_wait(asio::use_awaitable);
            co_await c.write_bytes(std::span(bytes + at, std::min<std::size_t>(2048, n - at)));
          }
        }
      }
      co_return co_await events_until(c, "done");
    });
    INFO(answer);
    CHECK(contains(answer, "\"event\":\"done\""));
    CHECK_FALSE(contains(ring.log(1), "ring broke"));
  }
}

TEST_CASE("serve: /healthz and /metrics report the ring and its jobs; nothing without the token gets in") {
  RingConfig two;
  two.world = 2;
  two.extra = {"--max-head-dim", "64"};
  DaemonRing ring(two);
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  auto [code, body] = http_get(ring.metrics(0), "/healthz");
  CHECK(code == 200);
  CHECK(body == "ok\n");
  const Checked r = submit_and_check(ring, 0, Inputs(Shape{128, 4, 4, 32}, 14, DType::f32), Mask::none(), {});
  REQUIRE(r.outcome.exit_code == 0);
  for (int k = 0; k < 2; ++k) {
    auto [c, m] = http_get(ring.metrics(k), "/metrics");
    INFO(m);
    CHECK(c == 200);
    CHECK(contains(m, "ringattn_jobs_total{result=\"ok\"} 1"));
    CHECK(contains(m, "ringattn_ring_state{state=\"ready\"} 1"));
    CHECK(contains(m, "# TYPE ringattn_job_seconds histogram"));
    CHECK(contains(m, "ringattn_bytes_sent_total "));
  }
  CHECK(http_get(ring.metrics(0), "/nothing").first == 404);
  // A client with another token is refused at the handshake, and says what to do.
  ScratchDir d;
  const std::string bad = d.file("token");
  {
    std::ofstream f(bad);
    f << "another-token-that-is-long-enough\n";
  }
  std::filesystem::permissions(bad, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const auto s = itest::run_ringattn({"status", "--to", ring.control(0), "--token-file", bad}, {}, 30);
  CHECK(s.exit_code == 1);
  CHECK(contains(s.err, "token"));
  // A job over the ring's limits is refused before any tensor moves.
  const Inputs big(Shape{64, 4, 4, 128}, 15, DType::f32);
  ScratchDir bd;
  big.write(bd);
  const auto o = itest::run_ringattn(ring.submit_args(0, bd.path().string(), {}), ring.env(), 60);
  INFO(o.err);
  CHECK(o.exit_code == 1);
  CHECK(contains(o.err, "head_dim = 128 is outside 1..64"));
  CHECK(!std::filesystem::exists(bd.file("o.npy")));
}

TEST_CASE("serve: with --tls every connection is encrypted, a plain client is refused; --log-format json is one object per line; --wire-dtype is the jobs' default") {
  RingConfig c;
  c.world = 2;
  c.extra = {"--tls", "--log-format", "json", "--wire-dtype", "bf16"};
  c.client = {"--tls"};
  DaemonRing ring(c);
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  const Checked r = submit_and_check(ring, 1, Inputs(Shape{257, 4, 2, 32}, 16, DType::bf16), Mask::causal(), {"--causal", "--json"});
  INFO(r.outcome.err);
  REQUIRE(r.outcome.exit_code == 0);
  CHECK(r.err_o <= kTolBf16);
  CHECK(contains(r.outcome.out, "\"dtype\":\"bf16\""));
  const auto plain = itest::run_ringattn({"status", "--to", ring.control(0)}, ring.env(), 30);
  CHECK(plain.exit_code == 1);
  CHECK(contains(plain.err, "--tls"));
  // Every line of the daemons' logs is a JSON object with the rank.
  for (int k = 0; k < 2; ++k) {
    const std::string log = ring.log(k);
    std::size_t lines = 0, start = 0;
    for (std::size_t nl; (nl = log.find('\n', start)) != std::string::npos; start = nl + 1, ++lines) {
      const std::string line = log.substr(start, nl - start);
      INFO(line);
      CHECK(line.rfind("{\"ts\":\"", 0) == 0);
      CHECK(contains(line, "\"rank\":" + std::to_string(k) + ","));
      CHECK(line.back() == '}');
    }
    CHECK(lines >= 2);
  }
}

TEST_CASE("serve: a request nested 50,000 deep is refused as invalid JSON; no daemon dies (rank 0 or a worker)") {
  DaemonRing ring({});
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  const std::string deep(50000, '[');  // 50 KB: within the message cap, far beyond the depth bound
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    const std::string answer = control_exchange(ring, rank, deep);
    CHECK(contains(answer, "\"event\":\"error\""));
    CHECK(contains(answer, "nested deeper than 64 levels"));
    CHECK(contains(control_exchange(ring, rank, "{\"op\":\"status\"}"), "\"event\":\"status\""));
  }
  for (int k = 0; k < 3; ++k) CHECK(ring.running(k));
  const Checked r = submit_and_check(ring, 0, Inputs(Shape{200, 4, 4, 32}, 14, DType::f32), Mask::none(), {});
  CHECK(r.outcome.exit_code == 0);
  CHECK(r.err_o <= kTolF32);
}

}  // namespace ringattn::stest
