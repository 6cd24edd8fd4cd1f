// Rings of 1..4 transports on loopback, in threads of one process: blocks travel around
// for several laps with every element checked, as the ring schedule will use them
// (double-buffered, relaying the received CRC).
#include <doctest/doctest.h>

#include <atomic>

#include "net/crc32c.hpp"
#include "net/group_transport.hpp"
#include "net/wire.hpp"
#include "ring_fixture.hpp"
#include "ringattn/error.hpp"

using namespace ringattn;
using namespace ringattn::net;
using namespace ringattn::net::test;

namespace {

// A block of 8 KV heads of 128, fp32, of `rows` rows (the size only: net sees bytes).
std::size_t big_bytes(std::size_t rows) { return 32 + rows * (8 + 2 * 1024 * 4); }

// One rank's part of `laps` laps: at step s it sends the block it holds (starting with its
// own) and receives the block that started at rank (r - s - 1) mod P.
void run_ring_rank(Transport& t, int laps) {
  const int P = t.world(), r = t.rank();
  auto rows_of = [&](int origin) { return static_cast<std::uint32_t>(1 + (origin * 13) % kSmallRows); };
  const std::size_t max_elems = kv_bytes(kSmallRows) / 4;
  std::vector<float> a(max_elems), b(max_elems), expect(max_elems);
  fill_block(a, r, 0);
  int held = r;  // origin of the block in `a`
  std::optional<std::uint32_t> crc;
  for (int step = 0; step < laps * P; ++step) {
    const std::uint32_t rows = rows_of(held);
    const std::size_t elems = kv_bytes(rows) / 4;
    Request s = t.isend(t.successor(), kv_header(1, static_cast<std::uint64_t>(step), rows), bytes_of(a, elems), crc);
    Request q = t.irecv(t.predecessor(), kv_header(1, static_cast<std::uint64_t>(step)), std::as_writable_bytes(std::span(b)));
    t.wait(s);
    const FrameHeader h = t.wait(q);
    const int origin = ((r - step - 1) % P + P) % P;
    REQUIRE(h.kind == FrameKind::data);
    REQUIRE(h.tag == kv_header(1, static_cast<std::uint64_t>(step)));
    REQUIRE(h.payload_bytes == kv_bytes(rows_of(origin)));
    fill_block(expect, origin, 0);
    REQUIRE(std::memcmp(b.data(), expect.data(), h.payload_bytes) == 0);
    crc = h.payload_crc;  // relay without recomputing
    std::swap(a, b);
    held = origin;
  }
}

}  // namespace

TEST_CASE("ring: world size 1 needs no sockets") {
  auto t = make_tcp_transport(make_config(0, 1));
  CHECK(t->listen_port() == 0);
  t->connect({{"127.0.0.1", 0}});
  run_ring_rank(*t, 3);
  const TransportStats st = t->stats();
  CHECK(st.frames_sent == 3);
  CHECK(st.frames_received == 3);
  // A receive with nothing sent times out with a clear error instead of hanging.
  TransportConfig c = make_config(0, 1, milliseconds(100));
  auto lone = make_tcp_transport(c);
  std::vector<std::byte> buf(64);
  Request q = lone->irecv(lone->predecessor(), kv_header(1, 0), buf);
  CHECK_THROWS_WITH_AS(lone->wait(q), doctest::Contains("timed out"), NetworkError);
  t->close();
  t->close();  // idempotent
}

TEST_CASE("ring: 2, 3 and 4 ranks pass blocks around for several laps; the bytes counted by link") {
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    Ring ring = make_ring(world);
    const auto errors = run_ranks(world, [&](int r) { run_ring_rank(*ring[static_cast<std::size_t>(r)], 3); });
    for (const auto& e : errors) CHECK(message_of(e) == "");
    for (const auto& t : ring) {
      const TransportStats st = t->stats();
      CHECK(st.frames_sent == static_cast<std::uint64_t>(3 * world));
      CHECK(st.frames_received == static_cast<std::uint64_t>(3 * world));
      CHECK(st.bytes_sent > 3u * world * kHeaderBytes);
      CHECK(st.io_cpu_seconds >= 0.0);
      // By link: the blocks went to the successor and came from the predecessor; the totals
      // are the links' sums (a PING may have crossed another link).
      std::uint64_t sent = 0, received = 0;
      bool to_successor = false, from_predecessor = false;
      for (std::size_t i = 0; i < st.links.size(); ++i) {
        const auto& l = st.links[i];
        CHECK(l.peer != t->rank());
        if (i > 0) CHECK(l.peer > st.links[i - 1].peer);
        sent += l.bytes_sent;
        received += l.bytes_received;
        to_successor = to_successor || (l.peer == t->successor() && l.bytes_sent > 3u * world * kHeaderBytes);
        from_predecessor = from_predecessor || (l.peer == t->predecessor() && l.bytes_received > 3u * world * kHeaderBytes);
      }
      CHECK(sent == st.bytes_sent);
      CHECK(received == st.bytes_received);
      CHECK(to_successor);
      CHECK(from_predecessor);
    }
    close_all(ring);
  }
}

TEST_CASE("ring: large blocks, several sends in flight, in order") {
  // 8 MiB K/V blocks: many read/write chunks per frame.
  auto tweak = [](TransportConfig& c) { c.limits.max_payload = big_bytes(2048); };
  Ring ring = make_ring(2, tweak);
  const std::size_t elems = big_bytes(2048) / 4;
  constexpr int kFrames = 6;
  const auto errors = run_ranks(2, [&](int r) {
    Transport& t = *ring[static_cast<std::size_t>(r)];
    std::vector<std::vector<float>> out(kFrames, std::vector<float>(elems)), in(kFrames, std::vector<float>(elems));
    std::vector<Request> sends, recvs;
    for (int i = 0; i < kFrames; ++i) {
      fill_block(out[static_cast<std::size_t>(i)], r, static_cast<std::uint64_t>(i));
      recvs.push_back(t.irecv(t.predecessor(), kv_header(9, static_cast<std::uint64_t>(i)),
                              std::as_writable_bytes(std::span(in[static_cast<std::size_t>(i)]))));
    }
    for (int i = 0; i < kFrames; ++i)
      sends.push_back(t.isend(t.successor(), kv_header(9, static_cast<std::uint64_t>(i)),
                              bytes_of(out[static_cast<std::size_t>(i)], elems)));
    std::vector<float> expect(elems);
    for (int i = 0; i < kFrames; ++i) {
      const FrameHeader h = t.wait(recvs[static_cast<std::size_t>(i)]);
      REQUIRE(h.tag.step == static_cast<std::uint64_t>(i));
      fill_block(expect, 1 - r, static_cast<std::uint64_t>(i));
      REQUIRE(in[static_cast<std::size_t>(i)] == expect);
      CHECK(t.test(recvs[static_cast<std::size_t>(i)]));
      CHECK(t.wait(recvs[static_cast<std::size_t>(i)]) == h);  // waiting again returns the same header
    }
    for (auto& s : sends) t.wait(s);
  });
  for (const auto& e : errors) CHECK(message_of(e) == "");
  close_all(ring);
}

TEST_CASE("ring: misuse is refused up front") {
  auto t = make_tcp_transport(make_config(0, 2));
  std::vector<std::byte> buf(1024);
  CHECK_THROWS_AS(t->irecv(t->predecessor(), kv_header(0, 0), buf), InvalidArgument);  // before connect()
  CHECK_THROWS_AS(t->connect({{"127.0.0.1", 1}}), InvalidArgument);  // one address for two ranks
  TransportConfig bad = make_config(0, 2);
  bad.secret.clear();
  CHECK_THROWS_WITH_AS(make_tcp_transport(bad), doctest::Contains("secret"), InvalidArgument);
  bad = make_config(2, 2);
  CHECK_THROWS_AS(make_tcp_transport(bad), InvalidArgument);
  bad = make_config(0, 2);
  bad.listen_host = "not-an-address";
  CHECK_THROWS_AS(make_tcp_transport(bad), InvalidArgument);

  Ring ring = make_ring(2);
  std::vector<std::byte> payload(kv_bytes(kSmallRows) + 1);
  CHECK_THROWS_WITH_AS(ring[0]->isend(ring[0]->successor(), kv_header(0, 0), payload),
                       doctest::Contains("exceeds the negotiated maximum"), InvalidArgument);
  CHECK_THROWS_WITH_AS(ring[0]->isend(ring[0]->successor(), Tag{0, 0, 0}, std::span(payload).first(10)),
                       doctest::Contains("'schedule' = 0"), InvalidArgument);
  CHECK_THROWS_WITH_AS(ring[0]->irecv(ring[0]->predecessor(), Tag{0, 1, 1}, buf), doctest::Contains("schedule 0"),
                       InvalidArgument);
  Request empty;
  CHECK_THROWS_AS(ring[0]->wait(empty), InvalidArgument);
  close_all(ring);
  // After close every request fails at once.
  Request q = ring[0]->irecv(ring[0]->predecessor(), kv_header(0, 0), buf);
  CHECK_THROWS_WITH_AS(ring[0]->wait(q), doctest::Contains("closed"), NetworkError);
}

TEST_CASE("ring: a payload gathered from three arrays arrives as one, with the CRC of the whole") {
  // A rank's own block goes out as [prefix + positions][K][V] from three places; the parts
  // here straddle the 2 MiB write chunks, and one is empty. World of one too (the copy path).
  auto tweak = [](TransportConfig& c) { c.limits.max_payload = big_bytes(2048); };
  const std::size_t total = big_bytes(2000);  // prefix + tags + K + V bytes
  std::vector<std::byte> whole(total);
  for (std::size_t i = 0; i < total; ++i) whole[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  const std::span<const std::byte> all(whole);
  const std::size_t head = 32 + 8 * 2000;
  const std::size_t cuts[][2] = {{head, head + (total - head) / 2},                           // as a block
                                 {3, (2u << 20) + 5},                                         // across a chunk
                                 {0, total}};                                                 // empty parts
  for (const auto& cut : cuts) {
    const Payload gathered(all.subspan(0, cut[0]), all.subspan(cut[0], cut[1] - cut[0]), all.subspan(cut[1]));
    REQUIRE(gathered.size() == total);
    for (int world : {1, 2}) {
      CAPTURE(world);
      CAPTURE(cut[0]);
      Ring ring = make_ring(world, tweak);
      const auto errors = run_ranks(world, [&](int r) {
        Transport& t = *ring[static_cast<std::size_t>(r)];
        std::vector<std::byte> in(total);
        Request q = t.irecv(t.predecessor(), kv_header(5, 0), in);
        Request s = t.isend(t.successor(), kv_header(5, 0), gathered);
        t.wait(s);
        const FrameHeader h = t.wait(q);
        REQUIRE(h.payload_bytes == total);
        CHECK(h.payload_crc == crc32c(all));
        CHECK(in == whole);
      });
      for (const auto& e : errors) CHECK(message_of(e) == "");
      close_all(ring);
    }
  }
}

TEST_CASE("ring: frames go to the receive that names their tag, in any order; any call; between any two ranks") {
  Ring ring = make_ring(3);
  const auto errors = run_ranks(3, [&](int r) {
    Transport& t = *ring[static_cast<std::size_t>(r)];
    if (r == 0) {
      std::vector<Request> sends;
      const std::string hello = "rank 0 says hello";
      for (int to : {1, 2}) {
        sends.push_back(t.isend(to, Tag{40 + static_cast<std::uint32_t>(to), 9, 0},
                                std::as_bytes(std::span(hello.data(), hello.size()))));
        sends.push_back(t.isend(to, Tag{50, 9, 1}, std::span<const std::byte>()));
        sends.push_back(t.isend(to, Tag{60, 123, 2}, std::as_bytes(std::span(hello.data(), 4))));
      }
      for (auto& s : sends) t.wait(s);
      return;
    }
    // Received last-sent first: the earlier frames wait, held, for their receives.
    std::vector<std::byte> any(8);
    Request qa = t.irecv(0, Tag{60, kAnyCall, 2}, any);
    const FrameHeader ha = t.wait(qa);
    CHECK(ha.tag == Tag{60, 123, 2});
    CHECK(ha.payload_bytes == 4);
    std::vector<std::byte> in;
    Request e = t.irecv(0, Tag{50, 9, 1}, [&](const FrameHeader& eh) {
      in.resize(eh.payload_bytes);
      return std::span<std::byte>(in);
    });
    const FrameHeader he = t.wait(e);
    CHECK(he.tag == Tag{50, 9, 1});
    CHECK(he.payload_bytes == 0);
    Request q = t.irecv(0, Tag{40 + static_cast<std::uint32_t>(r), 9, 0}, [&](const FrameHeader& h) {
      in.resize(h.payload_bytes);
      return std::span<std::byte>(in);
    });
    const FrameHeader h = t.wait(q);
    CHECK(h.kind == FrameKind::data);
    CHECK(h.tag == Tag{40 + static_cast<std::uint32_t>(r), 9, 0});
    CHECK(std::string(reinterpret_cast<const char*>(in.data()), in.size()) == "rank 0 says hello");
  });
  for (const auto& x : errors) CHECK(message_of(x) == "");
  close_all(ring);
}

TEST_CASE("ring: held frames are bounded, and the caller's conflict rule refuses a frame at once, naming both tags") {
  SUBCASE("more held than the bound fails the transport, naming the tags") {
    Ring ring = make_ring(2, [](TransportConfig& c) { c.max_held_bytes = 100; });
    const auto errors = run_ranks(2, [&](int r) {
      Transport& t = *ring[static_cast<std::size_t>(r)];
      std::vector<std::byte> payload(60);
      if (r == 0) {
        Request a = t.isend(1, Tag{5, 1, 0}, payload);
        Request b = t.isend(1, Tag{5, 1, 1}, payload);
        t.wait(a);
        t.wait(b);
        return;
      }
      std::vector<std::byte> in(60);
      Request q = t.irecv(0, Tag{5, 1, 2}, in);  // never sent: steps 0 and 1 are held, 120 > 100 bytes
      t.wait(q);
    });
    const std::string e1 = message_of(errors[1]);
    CHECK_MESSAGE(e1.find("would hold more than 100 bytes") != std::string::npos, e1);
    CHECK_MESSAGE(e1.find("schedule 0x00000005 call 1 step 1") != std::string::npos, e1);
    CHECK_MESSAGE(e1.find("while it waits for schedule 0x00000005 call 1 step 2") != std::string::npos, e1);
    close_all(ring);
  }
  SUBCASE("a conflicting frame fails every rank with the rule's reason") {
    auto rule = [](TransportConfig& c) {
      c.conflict = [](const Tag& waiting, const Tag& arrived) {
        return waiting.schedule != arrived.schedule ? std::string("schedules ") + std::to_string(waiting.schedule) +
                                                          " and " + std::to_string(arrived.schedule) + " never mix"
                                                    : std::string();
      };
    };
    Ring ring = make_ring(2, rule);
    const auto errors = run_ranks(2, [&](int r) {
      Transport& t = *ring[static_cast<std::size_t>(r)];
      std::vector<std::byte> buf(16);
      if (r == 0) {
        Request s = t.isend(1, Tag{8, 1, 0}, std::span(buf).first(8));
        t.wait(s);
        Request q = t.irecv(1, Tag{9, 1, 0}, buf);  // fails with the cause rank 1 found
        t.wait(q);
        return;
      }
      Request q = t.irecv(0, Tag{9, 1, 0}, buf);
      t.wait(q);
    });
    for (const auto& e : errors) {
      const std::string m = message_of(e);
      CHECK_MESSAGE(m.find("schedules 9 and 8 never mix") != std::string::npos, m);
    }
    close_all(ring);
  }
}

TEST_CASE("ring: a rank that announces it is leaving is heard by its peers at once, and frames still flow") {
  // Keep-alives an hour apart: the peers can only hear of it from the PING the announcement
  // sends there and then.
  Ring ring = make_ring(3, [](TransportConfig& c) {
    c.io_timeout = std::chrono::hours(1);
    c.keepalive = std::chrono::hours(1);
  });
  for (const auto& t : ring) CHECK(t->leaving_peers().empty());
  ring[2]->announce_leaving();
  for (int r : {0, 1}) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (ring[static_cast<std::size_t>(r)]->leaving_peers().empty() && Clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(5));
    CHECK(ring[static_cast<std::size_t>(r)]->leaving_peers() == std::vector<int>{2});
  }
  CHECK(ring[2]->leaving_peers().empty());  // it does not hear itself
  const std::string text = "still here";
  const auto errors = run_ranks(3, [&](int r) {
    Transport& t = *ring[static_cast<std::size_t>(r)];
    if (r == 0) {
      Request s = t.isend(2, Tag{3, 0, 0}, std::as_bytes(std::span(text.data(), text.size())));
      t.wait(s);
    } else if (r == 2) {
      std::vector<std::byte> in;
      Request q = t.irecv(0, Tag{3, 0, 0}, [&](const FrameHeader& h) {
        in.resize(h.payload_bytes);
        return std::span<std::byte>(in);
      });
      t.wait(q);
      CHECK(std::string(reinterpret_cast<const char*>(in.data()), in.size()) == text);
    }
  });
  for (const auto& x : errors) CHECK(message_of(x) == "");
  close_all(ring);
}

TEST_CASE("ring: a group of ranks is a transport of its own, numbered by the group, on the ring's links") {
  Ring ring = make_ring(4, [](TransportConfig& c) { c.all_pairs = true; });
  // Ranks 1 and 3 as a group of two: rank 3 is the group's rank 1.
  GroupTransport g1(*ring[1], {1, 3}), g3(*ring[3], {1, 3});
  CHECK(g1.rank() == 0);
  CHECK(g3.rank() == 1);
  CHECK(g3.world() == 2);
  CHECK(g3.successor() == 0);
  CHECK(g3.ring_rank(0) == 1);
  CHECK(g3.ring_rank(1) == 3);
  CHECK(g3.parent_rank(1) == 3);
  const auto errors = run_ranks(2, [&](int r) {
    GroupTransport& g = r == 0 ? g1 : g3;
    const std::string text = "from group rank " + std::to_string(g.rank());
    std::vector<std::byte> in(64);
    Request q = g.irecv(g.predecessor(), Tag{9, 1, 0}, in);
    Request s = g.isend(g.successor(), Tag{9, 1, 0}, std::as_bytes(std::span(text.data(), text.size())));
    g.wait(s);
    const FrameHeader h = g.wait(q);
    CHECK(std::string(reinterpret_cast<const char*>(in.data()), h.payload_bytes) ==
          "from group rank " + std::to_string(1 - g.rank()));
  });
  for (const auto& e : errors) CHECK(message_of(e) == "");
  CHECK_THROWS_WITH_AS(GroupTransport(*ring[0], {1, 2}), doctest::Contains("must include this rank"), InvalidArgument);
  CHECK_THROWS_WITH_AS(GroupTransport(*ring[0], {0, 0}), doctest::Contains("twice"), InvalidArgument);
  CHECK_THROWS_WITH_AS(GroupTransport(*ring[0], {0, 4}), doctest::Contains("outside 0..3"), InvalidArgument);
  CHECK_THROWS_AS(g1.parent_rank(2), InvalidArgument);
  close_all(ring);
}
