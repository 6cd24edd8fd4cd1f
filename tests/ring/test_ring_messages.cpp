// Ring's messages (include/ringattn/messages.hpp) on real rings of threads: they travel
// between any two ranks beside forward() calls, in order; a receive that expects another
// type, a refused message and misuse fail as documented, naming the ranks and types.
#include <doctest/doctest.h>

#include <barrier>
#include <cstring>
#include <string>
#include <vector>

#include "ringattn/layout.hpp"
#include "ringattn/ring.hpp"
#include "tests/free_port.hpp"
#include "tests/ring/ranks_as_threads.hpp"

using namespace ringattn;
using test::on_ranks;
using test::options;

namespace {

// Waits at a barrier of the ranks' threads; a rank that throws before it drops out
// instead, so the others never wait for it.
struct Arrival {
  std::barrier<>& barrier;
  bool done = false;
  void wait() {
    done = true;
    barrier.arrive_and_wait();
  }
  ~Arrival() {
    if (!done) barrier.arrive_and_drop();
  }
};

std::string master() { return "127.0.0.1:" + std::to_string(test::free_port()); }

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

// Sends `text` as a message and waits.
void say(Ring& ring, int to, std::uint32_t type, std::uint64_t job, const std::string& text) {
  MessageRequest s = ring.send_message(to, type, job, bytes_of(text));
  ring.wait(s);
}

std::string hear(Ring& ring, int from, std::uint32_t type, MessageHeader* header = nullptr) {
  std::string got;
  MessageRequest r = ring.receive_message(from, type, [&](const MessageHeader& h) {
    got.resize(static_cast<std::size_t>(h.bytes));
    return std::as_writable_bytes(std::span(got.data(), got.size()));
  });
  const MessageHeader h = ring.wait(r);
  if (header) *header = h;
  return got;
}

}  // namespace

TEST_CASE("ring messages: from rank 0 to every rank and back, beside forward calls, with an empty one") {
  const int world = 3;
  const std::string m = master();
  std::barrier all(world);  // no rank closes its ring before every rank has checked its links
  const auto errors = on_ranks(world, [&](int r) {
    Arrival arrival{all};
    Ring ring = Ring::connect(options(r, world, m));
    for (int round = 0; round < 2; ++round) {
      if (r == 0) {
        for (int to = 1; to < world; ++to) say(ring, to, 7, 100 + round, "job for rank " + std::to_string(to));
        for (int from = 1; from < world; ++from) {
          MessageHeader h;
          CHECK(hear(ring, from, 8, &h) == "done by rank " + std::to_string(from));
          CHECK(h.job == static_cast<std::uint64_t>(100 + round));
          CHECK(h.type == 8);
        }
      } else {
        MessageHeader h;
        CHECK(hear(ring, 0, 7, &h) == "job for rank " + std::to_string(r));
        say(ring, 0, 8, h.job, "done by rank " + std::to_string(r));
      }
      // A forward between the rounds: the ring's own frames share the links.
      AttentionSpec spec{2, 2, 32, DType::f32, Mask::causal(), 0};
      const auto pos = shard_positions(Layout::zigzag, 64, world, r).materialize();
      const std::size_t n = pos.size() * 2 * 32;
      std::vector<float> q(n, 0.5f), k(n, 0.25f), v(n, 1.0f), o(n);
      ring.forward({spec, q, k, v, pos}, o);
      CHECK(o[0] == doctest::Approx(1.0f));
    }
    // An empty message.
    if (r == 1) {
      MessageRequest s = ring.send_message(2, 9, 5, {});
      ring.wait(s);
    }
    if (r == 2) {
      MessageHeader h;
      CHECK(hear(ring, 1, 9, &h).empty());
      CHECK(h.bytes == 0);
    }
    CHECK(ring.traffic().frames_sent > 0);
    CHECK(ring.link_failure().empty());
    arrival.wait();
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("ring messages: a message of another type waits for its own receive; one nobody sends fails as stalled") {
  const std::string m = master();
  std::vector<std::string> seen(2);
  const auto errors = on_ranks(2, [&](int r) {
    Ring ring = Ring::connect(options(r, 2, m, 2));
    if (r == 0) {
      say(ring, 1, 3, 1, "a TABLE");
      say(ring, 1, 2, 1, "an INFO");
      say(ring, 1, 3, 2, "another TABLE");
    } else {  // taken by type, in the order sent within each type
      MessageHeader h;
      CHECK(hear(ring, 0, 2, &h) == "an INFO");
      CHECK(h.job == 1);
      CHECK(hear(ring, 0, 3, &h) == "a TABLE");
      CHECK(hear(ring, 0, 3, &h) == "another TABLE");
      CHECK(h.job == 2);
    }
    // Now each waits for a type the other never sends: a cycle, which stalls at the timeout.
    try {
      if (r == 0) say(ring, 1, 5, 1, "unasked");
      hear(ring, 1 - r, 4);
    } catch (const NetworkError& e) {
      seen[static_cast<std::size_t>(r)] = e.what();
      CHECK(ring.broken());
    }
  });
  for (const auto& e : errors) CHECK(e == "");
  for (const auto& s : seen) {
    const bool stalled = s.find("made no progress") != std::string::npos || s.find("aborted") != std::string::npos;
    CHECK_MESSAGE(stalled, s);
  }
}

TEST_CASE("ring messages: a refused message fails the ring; misuse is refused up front") {
  const std::string m = master();
  std::vector<std::string> seen(2);
  const auto errors = on_ranks(2, [&](int r) {
    Ring ring = Ring::connect(options(r, 2, m, 5));
    CHECK_THROWS_AS(ring.send_message(r, 1, 0, {}), InvalidArgument);         // to itself
    CHECK_THROWS_AS(ring.send_message(2, 1, 0, {}), InvalidArgument);         // no such rank
    CHECK_THROWS_AS(ring.send_message(1 - r, 0, 0, {}), InvalidArgument);     // type 0
    CHECK_THROWS_AS(ring.receive_message(r, 1, {}), InvalidArgument);
    MessageRequest none;
    CHECK_THROWS_AS(ring.wait(none), InvalidArgument);
    try {
      if (r == 0) {
        say(ring, 1, 5, 1, "too long for the receiver");
        hear(ring, 1, 6);
      } else {
        MessageRequest q = ring.receive_message(0, 5, [](const MessageHeader&) { return std::span<std::byte>(); });
        ring.wait(q);
      }
    } catch (const NetworkError& e) {
      seen[static_cast<std::size_t>(r)] = e.what();
    }
  });
  for (const auto& e : errors) CHECK(e == "");
  CHECK_FALSE(seen[0].empty());
  CHECK(seen[1].find("payload bytes but the posted receive buffer holds 0") != std::string::npos);
}

TEST_CASE("ring messages: abort() fails every rank with the reason; on_step sees every step") {
  const std::string m = master();
  std::vector<std::string> seen(3);
  std::vector<std::vector<int>> steps(3);
  std::barrier forwards_done(3);  // rank 2 aborts only once every rank's forward calls are over
  const auto errors = on_ranks(3, [&](int r) {
    Arrival arrival{forwards_done};
    Ring ring = Ring::connect(options(r, 3, m, 5));
    ring.on_step([&, r](int s) { steps[static_cast<std::size_t>(r)].push_back(s); });
    AttentionSpec spec{2, 2, 32, DType::f32, Mask::none(), 0};
    const auto pos = shard_positions(Layout::contiguous, 48, 3, r).materialize();
    std::vector<float> q(pos.size() * 64, 0.1f), o(q.size());
    ring.forward({spec, q, q, q, pos}, o);
    ring.on_step({});
    ring.forward({spec, q, q, q, pos}, o);
    arrival.wait();
    try {
      if (r == 2) ring.abort("rank 2 is going away");
      hear(ring, (r + 1) % 3, 1);
    } catch (const NetworkError& e) {
      seen[static_cast<std::size_t>(r)] = e.what();
    }
  });
  for (const auto& e : errors) CHECK(e == "");
  for (int r = 0; r < 3; ++r) {
    CHECK(steps[static_cast<std::size_t>(r)] == std::vector<int>{0, 1, 2});
    CHECK(seen[static_cast<std::size_t>(r)].find("rank 2 is going away") != std::string::npos);
  }
}
