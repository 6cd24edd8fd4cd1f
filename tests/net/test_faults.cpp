// Faults end with a clear error naming the rank, the peer and the cause, within the
// configured timeout: wrong token, different shape or protocol version, a peer that never
// connects or never speaks, a peer that dies mid-frame, a corrupted payload, an absurd
// length field, a wait that runs out, a neighbour that leaves mid-ring.
#include <doctest/doctest.h>

#include "raw_peer.hpp"
#include "ring_fixture.hpp"
#include "ringattn/error.hpp"

using namespace ringattn;
using namespace ringattn::net;
using namespace ringattn::net::test;

namespace {

constexpr milliseconds kShort{1000};

// Connects `t` (rank 0 of 2) with a hand-driven rank 1 listening on `l`.
RawRank1 connect_raw_rank1(Transport& t, const TransportConfig& c, RawListener& l) {
  std::exception_ptr err;
  std::thread th([&] {
    try {
      t.connect({{"127.0.0.1", t.listen_port()}, {"127.0.0.1", l.port()}});
    } catch (...) {
      err = std::current_exception();
    }
  });
  RawRank1 raw;
  std::string e1 = "not run", e2 = "not run";
  try {
    raw.in = l.accept(milliseconds(5000));
    e1 = raw_handshake(raw.in.get(), Role::acceptor, raw_hello(c, 1), 0, c.secret);
    raw.out = raw_dial(t.listen_port());
    e2 = raw_handshake(raw.out.get(), Role::initiator, raw_hello(c, 1), 0, c.secret);
  } catch (const std::exception& e) {
    e1 = e.what();
  }
  th.join();
  REQUIRE(e1 == "");
  REQUIRE(e2 == "");
  REQUIRE(message_of(err) == "");
  return raw;
}

// Posts a receive on `t`, lets `act` misbehave, returns the error wait() throws.
std::string recv_error(Transport& t, std::span<std::byte> buf, const std::function<void()>& act) {
  Request q = t.irecv(t.predecessor(), kv_header(1, 0), buf);
  act();
  try {
    t.wait(q);
  } catch (const NetworkError& e) {
    return e.what();
  }
  return "no error";
}

FrameHeader valid_kv(std::uint32_t rows) {
  FrameHeader h = data_header(kv_header(1, 0));
  h.payload_bytes = kv_bytes(rows);
  return h;
}

}  // namespace

TEST_CASE("faults: a peer with the wrong token is refused on both sides") {
  Ring ring;
  for (int r = 0; r < 2; ++r) {
    TransportConfig c = make_config(r, 2, kShort);
    if (r == 1) c.secret = "another-secret-0123456789";
    ring.push_back(make_tcp_transport(c));
  }
  const auto t0 = Clock::now();
  const auto errors = run_ranks(2, [&](int r) { ring[static_cast<std::size_t>(r)]->connect(addresses(ring)); });
  CHECK(seconds_since(t0) < 1.0);  // refused at once, not by timeout
  for (int r = 0; r < 2; ++r) {
    const std::string m = message_of(errors[static_cast<std::size_t>(r)]);
    INFO(m);
    CHECK(m.find("rank " + std::to_string(r) + ":") == 0);
    CHECK(m.find("authentication failed") != std::string::npos);
  }
}

TEST_CASE("faults: different limits are refused naming the field") {
  Ring ring;
  for (int r = 0; r < 2; ++r) {
    TransportConfig c = make_config(r, 2, kShort);
    if (r == 1) c.limits.fields[2] = 32;  // max_head_dim
    ring.push_back(make_tcp_transport(c));
  }
  const auto errors = run_ranks(2, [&](int r) { ring[static_cast<std::size_t>(r)]->connect(addresses(ring)); });
  for (int r = 0; r < 2; ++r) {
    const std::string m = message_of(errors[static_cast<std::size_t>(r)]);
    INFO(m);
    CHECK(m.find("'max_head_dim'") != std::string::npos);
    CHECK(m.find("16") != std::string::npos);
    CHECK(m.find("32") != std::string::npos);
  }
}

TEST_CASE("faults: a different protocol version is told so, dropped, and named when the ring cannot form") {
  TransportConfig c = make_config(0, 2, kShort);
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
  Fd fd = raw_dial(t->listen_port());
  const HelloBytes hello = encode_hello(raw_hello(c, 1));
  FrameHeader h;
  h.kind = FrameKind::hello;
  h.payload_bytes = kHelloBytes;
  h.payload_crc = crc32c(hello);
  HeaderBytes hb = encode_header(h);
  hb[4] = std::byte{1};  // protocol version 1
  send_all(fd.get(), hb);
  send_all(fd.get(), hello);
  // The acceptor says nothing of itself to a peer it cannot speak with: only why.
  auto first = recv_control(fd.get());
  th.join();
  const std::string m = message_of(err);
  INFO(m);
  REQUIRE(first);
  CHECK(first->header.kind == FrameKind::error);
  CHECK(first->text().find("'version' = 1") != std::string::npos);
  CHECK(m.find("dropped 1 other connection(s)") != std::string::npos);  // named in the rank's own error
  CHECK(m.find("'version' = 1") != std::string::npos);
}

TEST_CASE("faults: a peer that never connects times out within connect_timeout") {
  auto t = make_tcp_transport(make_config(0, 2, milliseconds(800)));
  const auto t0 = Clock::now();
  std::string m;
  try {
    t->connect({{"127.0.0.1", t->listen_port()}, {"127.0.0.1", unused_port()}});
  } catch (const NetworkError& e) {
    m = e.what();
  }
  const double s = seconds_since(t0);
  INFO(m);
  CHECK(s >= 0.75);
  CHECK(s < 1.8);
  CHECK(m.find("rank 0:") == 0);
  CHECK(m.find("rank 1") != std::string::npos);
  CHECK(m.find("within 800 ms") != std::string::npos);
}

TEST_CASE("faults: a peer that connects but never speaks times out within connect_timeout") {
  auto t = make_tcp_transport(make_config(0, 2, milliseconds(800)));
  RawListener l;  // accepts in the kernel backlog, never answers
  Fd silent = raw_dial(t->listen_port());
  const auto t0 = Clock::now();
  std::string m;
  try {
    t->connect({{"127.0.0.1", t->listen_port()}, {"127.0.0.1", l.port()}});
  } catch (const NetworkError& e) {
    m = e.what();
  }
  INFO(m);
  CHECK(seconds_since(t0) < 1.8);
  CHECK(m.find("within 800 ms") != std::string::npos);
}

TEST_CASE("faults: a connection that is not a ringattn peer is ignored") {
  Ring ring;
  for (int r = 0; r < 2; ++r) ring.push_back(make_tcp_transport(make_config(r, 2, milliseconds(3000))));
  {
    Fd probe = raw_dial(ring[1]->listen_port());
    const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789012345678901234567890";
    send_all(probe.get(), std::as_bytes(std::span(junk.data(), junk.size())));
  }
  const auto errors = run_ranks(2, [&](int r) { ring[static_cast<std::size_t>(r)]->connect(addresses(ring)); });
  for (const auto& e : errors) CHECK(message_of(e) == "");
  close_all(ring);
}

TEST_CASE("faults: a peer that dies mid-frame is reported, not waited for") {
  TransportConfig c = make_config(0, 2, milliseconds(3000));
  auto t = make_tcp_transport(c);
  RawListener l;
  RawRank1 raw = connect_raw_rank1(*t, c, l);
  std::vector<std::byte> buf(kv_bytes(64));
  const auto t0 = Clock::now();
  const std::string m = recv_error(*t, buf, [&] {
    const std::vector<std::byte> payload(buf.size(), std::byte{7});  // not `buf`: the transport writes that
    FrameHeader h = valid_kv(64);
    h.payload_crc = crc32c(payload);
    send_all(raw.out.get(), encode_header(h));
    send_all(raw.out.get(), std::span(payload).first(payload.size() / 2));
    raw.out.reset();  // dies
  });
  INFO(m);
  CHECK(seconds_since(t0) < 1.0);
  CHECK(m.find("rank 0:") == 0);
  CHECK(m.find("predecessor rank 1 closed the connection (EOF) in the middle of a frame (schedule 0x00000007 call 1 step 0") != std::string::npos);
}

TEST_CASE("faults: a corrupted payload fails its CRC and the peer is told why") {
  TransportConfig c = make_config(0, 2, milliseconds(3000));
  auto t = make_tcp_transport(c);
  RawListener l;
  RawRank1 raw = connect_raw_rank1(*t, c, l);
  std::vector<std::byte> buf(kv_bytes(8));
  const std::string m = recv_error(*t, buf, [&] {
    std::vector<std::byte> payload(buf.size(), std::byte{0x5a});
    FrameHeader h = valid_kv(8);
    h.payload_crc = crc32c(payload);
    payload[100] ^= std::byte{1};  // flipped in transit
    send_all(raw.out.get(), encode_header(h));
    send_all(raw.out.get(), payload);
  });
  INFO(m);
  CHECK(m.find("payload CRC32C mismatch on a frame (schedule 0x00000007 call 1 step 0) from predecessor rank 1") != std::string::npos);
  // rank 0 tells its neighbours why it gives up.
  auto told = recv_control(raw.in.get());
  REQUIRE(told);
  CHECK(told->header.kind == FrameKind::error);
  CHECK(told->text().find("CRC32C mismatch") != std::string::npos);
}

TEST_CASE("faults: an oversized length field is rejected before any payload is read") {
  TransportConfig c = make_config(0, 2, milliseconds(3000));
  auto t = make_tcp_transport(c);
  RawListener l;
  RawRank1 raw = connect_raw_rank1(*t, c, l);
  std::vector<std::byte> buf(64);
  const std::string m = recv_error(*t, buf, [&] {
    FrameHeader h = valid_kv(8);
    h.payload_bytes = 1ull << 40;  // and no payload follows: the reader must not wait for it
    send_all(raw.out.get(), encode_header(h));
  });
  INFO(m);
  CHECK(m.find("bad frame header from predecessor rank 1: frame field 'payload_bytes' = 1099511627776") != std::string::npos);
}

TEST_CASE("faults: a valid frame larger than the posted buffer is rejected before reading it") {
  TransportConfig c = make_config(0, 2, milliseconds(3000));
  auto t = make_tcp_transport(c);
  RawListener l;
  RawRank1 raw = connect_raw_rank1(*t, c, l);
  std::vector<std::byte> buf(100);
  const std::string m = recv_error(*t, buf, [&] {
    send_all(raw.out.get(), encode_header(valid_kv(8)));  // header only: the payload is never read
  });
  INFO(m);
  CHECK(m.find("holds 100") != std::string::npos);
}

TEST_CASE("faults: a wait that runs out throws within io_timeout and the neighbour learns why") {
  Ring ring = make_ring(2, [](TransportConfig& c) { c.io_timeout = milliseconds(300); });
  std::vector<std::byte> buf(kv_bytes(64));
  const auto t0 = Clock::now();
  Request q = ring[0]->irecv(ring[0]->predecessor(), kv_header(1, 0), buf);  // rank 1 never sends
  CHECK_THROWS_WITH_AS(ring[0]->wait(q), doctest::Contains("rank 0: timed out after 300 ms waiting to receive from predecessor rank 1"),
                       NetworkError);
  CHECK(seconds_since(t0) < 1.0);
  Request q1 = ring[1]->irecv(ring[1]->predecessor(), kv_header(1, 0), buf);
  CHECK_THROWS_WITH_AS(ring[1]->wait(q1), doctest::Contains("rank 0 aborted: rank 0: timed out"), NetworkError);
  close_all(ring);
}

TEST_CASE("faults: a rank that leaves mid-ring ends its neighbours with its name, no hang") {
  Ring ring = make_ring(3);
  std::vector<std::byte> buf(kv_bytes(64));
  const auto t0 = Clock::now();
  Request q2 = ring[2]->irecv(ring[2]->predecessor(), kv_header(1, 0), buf);  // from rank 1
  Request q0 = ring[0]->irecv(ring[0]->predecessor(), kv_header(1, 0), buf);  // from rank 2
  ring[1]->close();
  CHECK_THROWS_WITH_AS(ring[2]->wait(q2), doctest::Contains("predecessor rank 1 closed the ring (BYE)"), NetworkError);
  // rank 2 passed the cause on to rank 0.
  try {
    ring[0]->wait(q0);
    FAIL("no error");
  } catch (const NetworkError& e) {
    CHECK(std::string(e.what()).find("rank 2 aborted: rank 2: predecessor rank 1") != std::string::npos);
    CHECK(e.origin_rank() == 1);  // rank 2 passed on where it began, not itself
    CHECK(e.cause() == FailureCause::peer_closed);
  }
  CHECK(seconds_since(t0) < 2.0);
  close_all(ring);
}
