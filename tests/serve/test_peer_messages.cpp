// The daemons' typed messages (src/serve/peer_messages.hpp): each one round-trips, and a
// hostile or corrupt payload is refused naming the message and the rank, before any field
// sizes or indexes anything.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ringattn/layout.hpp"
#include "src/serve/peer_messages.hpp"
#include "src/serve/ring_view.hpp"

using namespace ringattn;
using namespace ringattn::serve;

namespace {

RingLimits limits() {
  RingLimits l;
  l.max_rows = 4096;
  l.max_heads = 8;
  l.max_kv_heads = 8;
  l.max_head_dim = 128;
  return l;
}

JobRequest job() {
  JobRequest q;
  q.tokens = 64;
  q.heads = 4;
  q.kv_heads = 2;
  q.head_dim = 32;
  q.mask = Mask::causal();
  q.layout = Layout::zigzag;
  q.want_lse = true;
  return q;
}

template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const NetworkError& e) {
    CHECK(e.cause() == FailureCause::protocol);
    return e.what();
  }
  FAIL("not refused");
  return "";
}

}  // namespace

TEST_CASE("peer messages: INFO and TABLE round-trip and are bounded") {
  const peer::NodeInfo a{1, 2, "host-a", "127.0.0.1:7700", "127.0.0.1:9464", "0.9.0", "avx2"};
  const peer::NodeInfo back = peer::decode_info(peer::encode_info(a), 1);
  CHECK(back.host == "host-a");
  CHECK(back.control == "127.0.0.1:7700");
  CHECK(back.threads == 2);
  CHECK(refusal([&] { peer::decode_info(peer::encode_info(a), 2); }).find("names rank 1") != std::string::npos);
  auto bytes = peer::encode_info(a);
  bytes.resize(bytes.size() - 1);
  CHECK(refusal([&] { peer::decode_info(bytes, 1); }).find("the INFO from rank 1 ends at byte") != std::string::npos);
  bytes = peer::encode_info(a);
  bytes.push_back(std::byte{0});
  CHECK(refusal([&] { peer::decode_info(bytes, 1); }).find("1 bytes after its last field") != std::string::npos);
  bytes = peer::encode_info(a);
  bytes[8] = std::byte{0xFF};  // the host's length: 255 + ...
  bytes[11] = std::byte{0x7F};
  CHECK(refusal([&] { peer::decode_info(bytes, 1); }).find("holds a string of") != std::string::npos);

  peer::NodeInfo r0 = a;
  r0.rank = 0;
  const auto table = peer::encode_table({r0, a});
  const auto nodes = peer::decode_table(table, 2);
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[1].isa == "avx2");
  CHECK(refusal([&] { peer::decode_table(table, 3); }).find("lists 2 nodes for a ring of 3") != std::string::npos);
  CHECK(refusal([&] { peer::decode_table(peer::encode_table({a, r0}), 2); }).find("in place 0") != std::string::npos);
}

TEST_CASE("peer messages: SHARD round-trips; its size, shape and positions are checked") {
  const JobRequest q = job();
  const Positions pos = shard_positions(q.layout, q.tokens, 2, 1);
  auto payload = peer::shard_payload(q, pos);
  {
    const peer::Shard view = peer::shard_view(payload, q, pos.size());
    for (std::size_t i = 0; i < view.k.size(); ++i) view.k[i] = static_cast<float>(i);
  }
  const peer::Shard s = peer::decode_shard(payload, 2, limits());
  CHECK(s.request.heads == 4);
  CHECK(s.request.kv_heads == 2);
  CHECK(s.request.head_dim == 32);
  CHECK(s.request.mask.kind == MaskKind::causal);
  CHECK(s.request.layout == Layout::zigzag);
  CHECK(s.request.want_lse);
  CHECK(s.positions == pos.materialize());
  CHECK(s.k[5] == 5.0f);

  auto cut = payload;
  cut.resize(cut.size() - 4);
  CHECK(refusal([&] { peer::decode_shard(cut, 2, limits()); }).find("not whole rows") != std::string::npos);
  auto heads = payload;
  heads[0] = std::byte{9};  // 9 heads: over the ring's limit
  CHECK(refusal([&] { peer::decode_shard(heads, 2, limits()); }).find("has heads 9/2") != std::string::npos);
  auto order = payload;
  std::memcpy(order.data() + 32, order.data() + 40, 8);  // the first two positions equal
  CHECK(refusal([&] { peer::decode_shard(order, 2, limits()); }).find("not increasing") != std::string::npos);
  std::vector<std::byte> tiny(8);
  CHECK(refusal([&] { peer::decode_shard(tiny, 2, limits()); }).find("has 8 bytes") != std::string::npos);
}

TEST_CASE("peer messages: STATS round-trip; counts that are not whole numbers in range are refused") {
  const NodeResult n{1, 4096, 1.5, 1.25, 0.125, 3e12, 2, 1, 123456789};
  const NodeResult back = peer::decode_stats(peer::encode_stats(n), 1);
  CHECK(back.rank == 1);
  CHECK(back.rows == 4096);
  CHECK(back.seconds == 1.5);
  CHECK(back.useful_flops == 3e12);
  CHECK(back.steps == 2);
  CHECK(back.bytes_sent == 123456789);
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), 1e300, -1.0, 2.5}) {
    NodeResult x = n;
    auto bytes = peer::encode_stats(x);
    std::memcpy(bytes.data() + 4 * 8, &bad, 8);  // steps
    CHECK(refusal([&] { peer::decode_stats(bytes, 1); }).find("the STATS from rank 1 has steps") != std::string::npos);
  }
  CHECK(refusal([&] { peer::decode_stats(std::vector<std::byte>(63), 1); }).find("ends at byte 63") != std::string::npos);
}

TEST_CASE("a rank's status for GET /v1/ring: its figures are read; a hostile answer is refused naming the rank and the field") {
  const std::string good =
      R"({"rank":2,"state":"ready","host":"node-2","cache_rows":36,"bytes_sent":9007199254740992,"bytes_received":0,"extra":[1]})";
  const RankStatus s = read_rank_status(good, 2);
  CHECK(s.rank == 2);
  CHECK(s.state == "ready");
  CHECK(s.host == "node-2");
  CHECK(s.cache_rows == 36);
  CHECK(s.bytes_sent == 9007199254740992);  // 2^53: exact in JavaScript
  CHECK(s.bytes_received == 0);
  auto refused = [&](const std::string& from, const std::string& to, int rank = 2) {
    std::string bad = good;
    REQUIRE(bad.find(from) != std::string::npos);
    bad.replace(bad.find(from), from.size(), to);
    try {
      read_rank_status(bad, rank);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    FAIL("not refused: " << bad);
    return std::string();
  };
  CHECK(refused("{", "[").find("rank 2's status is not JSON") == 0);
  CHECK(refused(R"("rank":2)", R"("rank":1)").find("rank 2's status says it is rank 1") == 0);
  CHECK(refused("ready", "on fire").find("\"state\" is not one of") != std::string::npos);
  CHECK(refused(R"("node-2")", "\"" + std::string(256, 'x') + "\"").find("\"host\" must be a string of at most 255 bytes") !=
        std::string::npos);
  CHECK(refused(R"("host":"node-2",)", "").find("\"host\" must be a string") != std::string::npos);
  for (const char* bad : {"-1", "36.5", "\"36\"", "1e3", "9007199254740993", "null"})
    CHECK(refused(R"("cache_rows":36)", std::string(R"("cache_rows":)") + bad).find("rank 2's status: cache_rows") == 0);
  CHECK(refused(R"("bytes_received":0,)", "").find("rank 2's status has no \"bytes_received\"") == 0);
  CHECK(refused(R"({"rank":2,)", R"({"rank":2,"rank":2,)").find("not JSON") != std::string::npos);  // a repeated key
  // Its links: the bytes it sent to each peer, peers ascending, other ranks, at most 4096 of them.
  const std::string links = R"("extra":[1])";
  {
    std::string with = good;
    with.replace(with.find(links), links.size(), R"("links":[{"peer":0,"bytes_sent":7},{"peer":3,"bytes_sent":9007199254740992}])");
    const RankStatus l = read_rank_status(with, 2);
    CHECK(l.links == std::vector<std::pair<int, std::int64_t>>{{0, 7}, {3, 9007199254740992}});
  }
  CHECK(read_rank_status(good, 2).links.empty());  // none listed
  CHECK(refused(links, R"("links":{})").find("\"links\" must be an array of at most 4096 links") != std::string::npos);
  CHECK(refused(links, R"("links":[{"peer":2,"bytes_sent":1}])").find("other ranks, ascending") != std::string::npos);
  CHECK(refused(links, R"("links":[{"peer":1,"bytes_sent":1},{"peer":0,"bytes_sent":1}])").find("other ranks, ascending") != std::string::npos);
  CHECK(refused(links, R"("links":[{"peer":1,"bytes_sent":1},{"peer":1,"bytes_sent":1}])").find("other ranks, ascending") != std::string::npos);
  CHECK(refused(links, R"("links":[{"peer":4096,"bytes_sent":1}])").find("a link: peer") != std::string::npos);
  CHECK(refused(links, R"("links":[{"peer":1,"bytes_sent":-1}])").find("a link: bytes_sent") != std::string::npos);
  CHECK(refused(links, R"("links":[{"peer":1}])").find("needs a \"peer\" and \"bytes_sent\"") != std::string::npos);
  std::string many = R"("links":[)";
  for (int p = 0; p <= 4096; ++p) many += std::string(p ? "," : "") + R"({"peer":)" + std::to_string(p) + R"(,"bytes_sent":1})";
  CHECK(refused(links, many + "]").find("at most 4096 links") != std::string::npos);
}
