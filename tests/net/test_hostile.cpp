// Hostile and idle connections, the order of proofs, liveness, and TLS on the transport:
// what an outsider on the network can and cannot do to a ring, and deadlines that
// measure silence, not work.
#include <doctest/doctest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <atomic>
#include <thread>

#include "raw_peer.hpp"
#include "ring_fixture.hpp"
#include "ringattn/error.hpp"
#include "core/logger.hpp"

using namespace ringattn;
using namespace ringattn::net;
using namespace ringattn::net::test;

namespace {

// Captures the "net" logger's lines for the lifetime of the object.
class NetLog {
 public:
  NetLog() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)) { logger("net")->sinks().push_back(sink_); }
  ~NetLog() {
    auto& sinks = logger("net")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const {
    std::string all;
    for (const auto& l : sink_->last_formatted()) all += l;
    return all;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

std::uint16_t local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// Sends one block from every rank to its successor and checks it arrived.
void exchange_once(Ring& ring) {
  const auto errors = run_ranks(static_cast<int>(ring.size()), [&](int r) {
    auto& t = *ring[static_cast<std::size_t>(r)];
    std::vector<float> a(kv_bytes(8) / 4), b(a.size()), want(a.size());
    fill_block(a, r, 1);
    Request s = t.isend(t.successor(), kv_header(1, 0, 8), bytes_of(a, a.size()));
    Request q = t.irecv(t.predecessor(), kv_header(1, 0), std::as_writable_bytes(std::span(b)));
    t.wait(s);
    t.wait(q);
    fill_block(want, (r + t.world() - 1) % t.world(), 1);
    if (b != want) throw std::runtime_error("rank " + std::to_string(r) + " received a wrong block");
  });
  for (const auto& e : errors) CHECK(message_of(e) == "");
}

}  // namespace

TEST_CASE("hostile: an idle socket and a garbage probe do not delay the real predecessor") {
  NetLog log;
  Ring ring;
  for (int r = 0; r < 2; ++r) {
    TransportConfig c = make_config(r, 2, milliseconds(10000));
    c.handshake_timeout = milliseconds(8000);  // longer than this test: the probes are still pending
    ring.push_back(make_tcp_transport(c));
  }
  // Both opened on rank 1's port before rank 0 (its predecessor) dials.
  Fd idle = raw_dial(ring[1]->listen_port());
  Fd probe = raw_dial(ring[1]->listen_port());
  const std::string junk = "GET /healthz HTTP/1";  // 19 bytes + 1: shorter than a frame header
  send_all(probe.get(), std::as_bytes(std::span(junk.data(), junk.size() + 1)));
  const auto errors = run_ranks(2, [&](int r) { ring[static_cast<std::size_t>(r)]->connect(addresses(ring)); });
  for (const auto& e : errors) CHECK(message_of(e) == "");
  exchange_once(ring);
  close_all(ring);
  // Both are named when they are dropped (here: at close, still in their handshake).
  const std::string lines = log.text();
  INFO(lines);
  CHECK(lines.find("dropped a connection from 127.0.0.1:" + std::to_string(local_port(idle.get()))) != std::string::npos);
  CHECK(lines.find("dropped a connection from 127.0.0.1:" + std::to_string(local_port(probe.get()))) != std::string::npos);
}

TEST_CASE("hostile: a connection that never completes its handshake is dropped at its own deadline") {
  NetLog log;
  TransportConfig c = make_config(1, 2, milliseconds(10000));
  c.handshake_timeout = milliseconds(200);
  auto t = make_tcp_transport(c);
  Fd idle = raw_dial(t->listen_port());
  // The transport closes the idle connection by itself, long before connect_timeout.
  const auto t0 = Clock::now();
  char byte;
  const ssize_t n = ::recv(idle.get(), &byte, 1, 0);  // SO_RCVTIMEO 5 s bounds this
  CHECK(n == 0);                                       // EOF: dropped, not timed out here
  CHECK(seconds_since(t0) < 4.0);
  t->close();
  // Named either when its deadline dropped it or, if close() came first, at close.
  INFO("log: " << log.text() << " sinks " << logger("net")->sinks().size() << " level " << int(logger("net")->level()));
  CHECK(log.text().find("dropped a connection from 127.0.0.1:" + std::to_string(local_port(idle.get()))) != std::string::npos);
}

TEST_CASE("hostile: a client without the token never receives the acceptor's proof") {
  TransportConfig c = make_config(1, 2, milliseconds(3000));
  auto t = make_tcp_transport(c);
  Fd fd = raw_dial(t->listen_port());
  Hello h = raw_hello(c, 0);
  fill_random(h.nonce);
  const HelloBytes mine = encode_hello(h);
  send_control(fd.get(), FrameKind::hello, mine);
  auto theirs = recv_control(fd.get());
  REQUIRE(theirs);
  CHECK(theirs->header.kind == FrameKind::hello);  // public: who it is, a fresh nonce
  // A proof made with a guessed token.
  const std::string guess = "not-the-ring-token-0123456789";
  const auto key = std::as_bytes(std::span(guess.data(), guess.size()));
  send_control(fd.get(), FrameKind::auth, auth_proof(key, Role::initiator, mine, theirs->payload));
  auto answer = recv_control(fd.get());
  REQUIRE(answer);
  CHECK(answer->header.kind == FrameKind::error);
  CHECK(answer->text().find("authentication failed") != std::string::npos);
  CHECK_FALSE(recv_control(fd.get()));  // and then the connection ends: never an AUTH
  // The failed client did not fail the transport: a real rank 0 still connects.
  auto t0 = make_tcp_transport(make_config(0, 2, milliseconds(3000)));
  Ring ring;
  ring.push_back(std::move(t0));
  ring.push_back(std::move(t));
  const auto errors = run_ranks(2, [&](int r) { ring[static_cast<std::size_t>(r)]->connect(addresses(ring)); });
  for (const auto& e : errors) CHECK(message_of(e) == "");
  close_all(ring);
}

TEST_CASE("liveness: a peer that computes for three timeouts but shows progress is waited for") {
  Ring ring = make_ring(2, [](TransportConfig& c) { c.io_timeout = milliseconds(300); });
  std::vector<float> a(kv_bytes(8) / 4, 1.0f), b(a.size());
  const auto errors = run_ranks(2, [&](int r) {
    auto& t = *ring[static_cast<std::size_t>(r)];
    if (r == 1) {  // a long fold: busy, ticking its counter as the kernel does per tile
      auto busy = t.liveness().enter(PeerState::busy);
      const auto end = Clock::now() + milliseconds(900);
      while (Clock::now() < end) {
        t.liveness().counter().fetch_add(1);
        std::this_thread::sleep_for(milliseconds(20));
      }
    }
    Request s = t.isend(t.successor(), kv_header(1, 0, 8), bytes_of(a, a.size()));
    Request q = t.irecv(t.predecessor(), kv_header(1, 0), std::as_writable_bytes(std::span(b)));
    t.wait(s);
    t.wait(q);
  });
  for (const auto& e : errors) CHECK(message_of(e) == "");
  close_all(ring);
}

TEST_CASE("liveness: a chain of ranks waiting behind one slow kernel stays alive (progress by proxy)") {
  // rank 0 waits on rank 2, which waits on rank 1, which computes for 3 timeouts.
  Ring ring = make_ring(3, [](TransportConfig& c) { c.io_timeout = milliseconds(300); });
  const auto errors = run_ranks(3, [&](int r) {
    auto& t = *ring[static_cast<std::size_t>(r)];
    std::vector<float> a(kv_bytes(8) / 4, float(r)), b(a.size());
    if (r == 1) {
      auto busy = t.liveness().enter(PeerState::busy);
      const auto end = Clock::now() + milliseconds(900);
      while (Clock::now() < end) {
        t.liveness().tick();
        std::this_thread::sleep_for(milliseconds(20));
      }
    }
    if (r != 2) {  // rank 2 forwards only what it got from rank 1
      Request s = t.isend(t.successor(), kv_header(1, 0, 8), bytes_of(a, a.size()));
      t.wait(s);
    }
    if (r != 1) {
      Request q = t.irecv(t.predecessor(), kv_header(1, 0), std::as_writable_bytes(std::span(b)));
      t.wait(q);
    }
    if (r == 2) {
      Request s = t.isend(t.successor(), kv_header(1, 0, 8), bytes_of(b, b.size()));
      t.wait(s);
    }
  });
  for (const auto& e : errors) CHECK(message_of(e) == "");
  close_all(ring);
}

TEST_CASE("liveness: a cycle of ranks waiting on each other stalls within the timeout, though frames moved as it closed") {
  // rank 0 sends a frame rank 1 holds (no receive names it), then each waits for a frame the
  // other never sends. Their PINGs pass each other's last progress back and forth: it only
  // ages, so both fail as stalled instead of keeping each other alive.
  Ring ring = make_ring(2, [](TransportConfig& c) { c.io_timeout = milliseconds(300); });
  const auto t0 = Clock::now();
  const auto errors = run_ranks(2, [&](int r) {
    auto& t = *ring[static_cast<std::size_t>(r)];
    std::vector<std::byte> buf(kv_bytes(8));
    if (r == 0) {
      Request s = t.isend(1, kv_header(1, 5), buf);
      t.wait(s);
    }
    t.liveness().tick();
    Request q = t.irecv(1 - r, kv_header(2, 0), buf);
    t.wait(q);
  });
  CHECK(seconds_since(t0) < 5.0);  // about the timeout; 10 s would be a hang
  for (const auto& e : errors) {
    const std::string m = message_of(e);
    const bool stalled = m.find("made no progress") != std::string::npos || m.find("aborted") != std::string::npos;
    CHECK_MESSAGE(stalled, m);
  }
  close_all(ring);
}

TEST_CASE("liveness: a busy peer whose kernel stopped advancing fails the wait, naming it") {
  Ring ring = make_ring(2, [](TransportConfig& c) { c.io_timeout = milliseconds(300); });
  std::vector<std::byte> buf(kv_bytes(64));
  std::atomic<bool> release{false};
  std::thread stuck([&] {
    auto busy = ring[1]->liveness().enter(PeerState::busy);  // and never ticks
    while (!release) std::this_thread::sleep_for(milliseconds(10));
  });
  Request q = ring[0]->irecv(ring[0]->predecessor(), kv_header(1, 0), buf);
  try {
    ring[0]->wait(q);
    FAIL("no error");
  } catch (const NetworkError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("predecessor rank 1: it is alive but made no progress (busy") != std::string::npos);
    CHECK(e.cause() == FailureCause::peer_stalled);
    CHECK(e.origin_rank() == 1);
  }
  release = true;
  stuck.join();
  close_all(ring);
}

TEST_CASE("liveness: a peer that falls silent (no keep-alives) fails the wait within about the timeout") {
  TransportConfig c = make_config(0, 2, milliseconds(500));
  auto t = make_tcp_transport(c);
  RawListener l;
  std::exception_ptr err;
  std::thread th([&] {
    try {
      t->connect({{"127.0.0.1", t->listen_port()}, {"127.0.0.1", l.port()}});
    } catch (...) {
      err = std::current_exception();
    }
  });
  Fd in = l.accept(milliseconds(5000));
  REQUIRE(raw_handshake(in.get(), Role::acceptor, raw_hello(c, 1), 0, c.secret) == "");
  Fd out = raw_dial(t->listen_port());
  REQUIRE(raw_handshake(out.get(), Role::initiator, raw_hello(c, 1), 0, c.secret) == "");
  th.join();
  REQUIRE(message_of(err) == "");
  // The raw rank 1 never sends a keep-alive: like a SIGSTOPped process.
  std::vector<std::byte> buf(kv_bytes(8));
  Request q = t->irecv(t->predecessor(), kv_header(1, 0), buf);
  const auto t0 = Clock::now();
  try {
    t->wait(q);
    FAIL("no error");
  } catch (const NetworkError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("no sign of life") != std::string::npos);
    CHECK(e.cause() == FailureCause::peer_silent);
    CHECK(e.origin_rank() == 1);
  }
  CHECK(seconds_since(t0) < 5.0);  // a hang guard, not a speed target
  t->close();
}

TEST_CASE("tls: a ring with encryption in transit moves blocks intact; a plain peer cannot join it") {
  SUBCASE("both ends with TLS") {
    Ring ring = make_ring(3, [](TransportConfig& c) { c.tls = true; });
    exchange_once(ring);
    close_all(ring);
  }
  SUBCASE("one end without TLS: refused with a hint, never a hang") {
    Ring ring;
    for (int r = 0; r < 2; ++r) {
      TransportConfig c = make_config(r, 2, milliseconds(1500));
      c.tls = r == 0;
      ring.push_back(make_tcp_transport(c));
    }
    const auto errors = run_ranks(2, [&](int r) { ring[static_cast<std::size_t>(r)]->connect(addresses(ring)); });
    const std::string plain = message_of(errors[1]), tls = message_of(errors[0]);
    INFO(plain << "\n" << tls);
    CHECK(plain.find("TLS") != std::string::npos);
    CHECK(tls.find("TLS") != std::string::npos);
  }
}

namespace {

// A TCP proxy on the path between two ranks that forwards everything and, once
// `flip_at` bytes have passed from the dialler to the listener, flips one bit: the
// on-path attacker of the threat model.
class TamperingProxy {
 public:
  TamperingProxy(std::uint16_t target, std::size_t flip_at) : target_(target), flip_at_(flip_at) {
    thread_ = std::thread([this] { run(); });
  }
  ~TamperingProxy() {
    stop_ = true;
    thread_.join();
  }
  std::uint16_t port() const { return listener_.port(); }
  bool flipped() const { return flipped_; }

 private:
  void run() {
    Fd client;
    try {
      client = listener_.accept(milliseconds(10000));
    } catch (...) {
      return;
    }
    Fd server = raw_dial(target_);
    std::size_t passed = 0;
    std::vector<std::byte> buf(64 * 1024);
    while (!stop_) {
      pollfd p[2] = {{client.get(), POLLIN, 0}, {server.get(), POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int from = i == 0 ? client.get() : server.get(), to = i == 0 ? server.get() : client.get();
        const ssize_t n = ::recv(from, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n <= 0) return;
        if (i == 0 && !flipped_ && passed + static_cast<std::size_t>(n) > flip_at_) {
          buf[flip_at_ - passed] ^= std::byte{0x01};
          flipped_ = true;
        }
        if (i == 0) passed += static_cast<std::size_t>(n);
        try {
          send_all(to, std::span(buf).first(static_cast<std::size_t>(n)));
        } catch (...) {
          return;
        }
      }
    }
  }
  RawListener listener_;
  std::uint16_t target_;
  std::size_t flip_at_;
  std::atomic<bool> stop_{false}, flipped_{false};
  std::thread thread_;
};

}  // namespace

TEST_CASE("tls: a bit flipped on the path is detected and fails the connection, never reaching the data") {
  // Rank 0 dials rank 1 through the proxy; the flip lands in the first data frame.
  Ring ring;
  for (int r = 0; r < 2; ++r) {
    TransportConfig c = make_config(r, 2, milliseconds(3000));
    c.tls = true;
    ring.push_back(make_tcp_transport(c));
  }
  TamperingProxy proxy(ring[1]->listen_port(), 4000);  // past the TLS and ringattn handshakes
  std::vector<PeerAddress> peers = {{"127.0.0.1", ring[0]->listen_port()}, {"127.0.0.1", proxy.port()}};
  const auto errors = run_ranks(2, [&](int r) { ring[static_cast<std::size_t>(r)]->connect(peers); });
  for (const auto& e : errors) REQUIRE(message_of(e) == "");
  std::vector<float> a(kv_bytes(64) / 4, 1.0f), b(a.size(), 0.0f);
  Request s = ring[0]->isend(ring[0]->successor(), kv_header(1, 0, 64), bytes_of(a, a.size()));
  Request q = ring[1]->irecv(ring[1]->predecessor(), kv_header(1, 0), std::as_writable_bytes(std::span(b)));
  std::string m;
  try {
    ring[1]->wait(q);
  } catch (const NetworkError& e) {
    m = e.what();
  }
  INFO(m);
  CHECK(proxy.flipped());
  CHECK(m.find("predecessor rank 0") != std::string::npos);  // the tampered link fails,
  CHECK(m.find("bad record mac") != std::string::npos);      // because the record's MAC did not verify
  close_all(ring);
}
